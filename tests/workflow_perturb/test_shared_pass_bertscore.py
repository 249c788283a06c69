"""One encoder pass per distinct text: the sentence vectors of sentence-transformers and the
BERTScore of bert_score from the same forward pass, on real WorFBench step texts
and the real MiniLM encoder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from metamorph import embeddings as emb
from metamorph.studies.workflow_perturb import metrics as wm
from metamorph.studies.workflow_perturb.metrics.scoring import EncodingCounts
from metamorph.studies.workflow_perturb.metrics.semantic import SharedPassBERTScore, shares_encoder
from metamorph.studies.workflow_perturb.plan import deterministic_perturbations
from metamorph.studies.workflow_perturb.workflows import load_goldens
from tests.conftest import shared_sample


@pytest.fixture(scope="module")
def minilm():
    return emb.load_encoder(prefer="minilm")


@pytest.fixture(scope="module")
def steps():
    """The first 16 distinct step texts of the shared WorFBench sample."""
    rows = [json.loads(line) for line in shared_sample("worfbench").read_text().splitlines()]
    texts = dict.fromkeys(n["text"] for r in rows for n in r["gold_nodes"])
    return list(texts)[:16]


class Spy:
    """The real encoder, recording every text that goes through it."""

    def __init__(self, encoder):
        self._enc, self.info, self.name, self.seen = encoder, encoder.info, encoder.name, []

    def encode(self, texts):
        self.seen += list(texts)
        return self._enc.encode(texts)

    def encode_with_tokens(self, texts):
        self.seen += list(texts)
        return self._enc.encode_with_tokens(texts)

    def token_vectors(self, ids):
        self.seen += [f"<ids:{len(x)}>" for x in ids]
        return self._enc.token_vectors(ids)


class TwoPass:
    """The real encoder without ``encode_with_tokens``: BERTScore then runs bert_score's own model."""

    def __init__(self, encoder):
        self._enc, self.info, self.name = encoder, encoder.info, encoder.name

    def encode(self, texts):
        return self._enc.encode(texts)


def _bert_score(minilm, cands, refs, baseline):
    """bert_score's own ``score`` on the MiniLM directory: layer 6, idf off, rescaled when asked."""
    import bert_score

    emb.prepare_hf()
    kw = {"rescale_with_baseline": True, "baseline_path": baseline, "lang": "en"} if baseline else {}
    assert minilm.info.num_layers == 6
    return bert_score.score(
        cands, refs, model_type=str(minilm.info.path), num_layers=6, idf=False, batch_size=64, device="cpu", **kw
    )


@pytest.mark.parametrize("rescaled", [False, True])
def test_one_pass_gives_bert_scores_prf_and_the_sentence_vectors(minilm, steps, rescaled):
    baseline = str(wm.packaged_baseline(emb.MINILM_NAME)) if rescaled else None
    cands = steps[:8]
    refs = [steps[0], *steps[9:16]]  # pair 0 is identical, the others unrelated steps
    texts = list(dict.fromkeys(cands + refs))
    vecs, tokens, ids = minilm.encode_with_tokens(texts)
    st = minilm.model.encode(texts, batch_size=minilm.batch_size, normalize_embeddings=True)
    assert vecs.shape == (len(texts), 384) and np.abs(vecs - st).max() <= 1e-6
    shared = SharedPassBERTScore(minilm, baseline)
    shared.add(texts, tokens, ids)
    got = shared.score(cands, refs)
    want = _bert_score(minilm, cands, refs, baseline)
    for g, w in zip(got, want):
        assert g.shape == (8,) and float((g - w).abs().max()) <= 1e-6
    assert float(got[2][0]) == pytest.approx(1.0, abs=1e-6)  # identical texts
    assert shared.fallback_texts == 0


def test_a_text_longer_than_the_encoder_window_uses_bert_scores_tokens(minilm, steps):
    # MiniLM's sentence-transformers window is 256 tokens, bert_score's 512: the ids differ, so
    # BERTScore's vectors come from a second pass over bert_score's ids through the same weights
    long = " ".join(steps * 4)
    texts = [long, steps[0]]
    vecs, tokens, ids = minilm.encode_with_tokens(texts)
    assert len(ids[0]) == minilm.model.max_seq_length == 256
    shared = SharedPassBERTScore(minilm)
    shared.add(texts, tokens, ids)
    assert shared.fallback_texts == 1
    got = shared.score([long, steps[0]], [steps[0], long])
    want = _bert_score(minilm, [long, steps[0]], [steps[0], long], None)
    for g, w in zip(got, want):
        assert float((g - w).abs().max()) <= 1e-6


def test_score_workflows_encodes_each_distinct_text_once(minilm):
    golds, _ = load_goldens("worfbench:" + str(shared_sample("worfbench")), limit=2)
    variants = deterministic_perturbations(golds, severities=(0.5,))
    by_id = {g.workflow_id: g for g in golds}
    pairs = [(by_id[v.golden_id], v.workflow) for v in variants if v.workflow is not None]
    distinct = {t for g, p in pairs for t in (*g.nodes, *p.nodes)}
    assert shares_encoder(minilm, (minilm.info.path, minilm.info.num_layers))
    assert not shares_encoder(TwoPass(minilm), (minilm.info.path, minilm.info.num_layers))

    spy, counts = Spy(minilm), EncodingCounts()
    one = wm.score_workflows(pairs, spy, counts=counts)
    assert sorted(spy.seen) == sorted(distinct)  # every distinct text exactly once, nothing else
    assert (counts.distinct_texts, counts.encoded_texts, counts.bertscore_extra_texts) == (len(distinct),) * 2 + (0,)

    # chunks of 2 pairs: tokens are kept for the later chunks that need them, still once per text
    spy2, counts2 = Spy(minilm), EncodingCounts()
    chunked = wm.score_workflows(pairs, spy2, counts=counts2, chunk_pairs=2)
    assert sorted(spy2.seen) == sorted(distinct) and counts2.encoded_texts == len(distinct)

    two = wm.score_workflows(pairs, TwoPass(minilm), counts=(c3 := EncodingCounts()))
    assert c3.bertscore_extra_texts > 0  # bert_score encoded the BERTScore texts itself
    # the same scores up to float32 noise (sentence-transformers' padding differs with the batches)
    for a, b, c in zip(one, chunked, two):
        for r in (b, c):
            assert a.keys() == r.keys()
            for k, v in a.items():
                if k == "aligned_pairs":
                    assert [x[:2] for x in v] == [x[:2] for x in r[k]]
                    assert np.allclose([x[2] for x in v], [x[2] for x in r[k]], rtol=0, atol=2e-6)
                elif isinstance(v, float):
                    assert abs(v - r[k]) <= 1e-6, k
                else:
                    assert v == r[k], k
