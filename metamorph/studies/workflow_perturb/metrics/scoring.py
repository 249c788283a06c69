"""Every non-judge metric of (gold, candidate) pairs in one batch.

* **Empty gold** (no steps): every metric is ``None`` with reason ``"empty_gold"``.
* **Empty candidate** (no steps): Chain/Graph F1, BLEU, GLEU and BERTScore are ``0.0`` (reason
  ``"empty_candidate"``); never an exception. Kendall's τ is ``None`` (undefined; reason
  ``"empty_candidate"`` for the default ``gold_order`` τ).
* **Zero aligned steps**: Chain F1 = Graph F1 = 0 (reason ``"no_aligned_steps"``) — WorFBench's
  code would give Chain ``L = 1`` (its DP starts at 1) and Graph ``k ≥ 1`` (the sentinels).
* **Token-less text** (only whitespace/punctuation: no token contains a letter or digit): a
  token-less candidate scores BLEU = GLEU = 0.0 (``"candidate_without_tokens"``); a token-less
  gold gives ``None`` (``"gold_without_tokens"``). Neither can produce a false 1.0 (nltk gives
  GLEU = 1.0 for ``"..."`` vs ``"..."``).
* **Kendall's τ** (default: over the gold step order, :mod:`.order`) with fewer than 2 gold
  steps, or constant ranks, is undefined: ``None`` with a reason, never NaN (so it can never
  poison a mean).
* **Judge**: a truncated (``finish_reason`` length/max_tokens), errored, unparseable or
  out-of-range reply is excluded and counted as invalid, never scored 0; all invalid → None.

Deviations from WorFBench's reference code (deliberate)
-------------------------------------------------------
* Alignment: τ = 0.8 inclusive (WorFBench: > 0.6), solved with ``linear_sum_assignment`` and
  filtered afterwards (App. B.1).
* Graph F1 is App. B.2's common induced subgraph without START/END (``graph_method="induced"``);
  WorFBench's largest common connected component with sentinels is ``graph_method="worfbench"``.
  Both compare edges **through the alignment** (WorFBench compares raw predicted indices with
  gold indices, which is only right when the alignment is the identity).
* Chain F1 uses the gold list order; WorFBench takes the best over ≤ 20 topological sorts of the
  gold graph when it has < 10 nodes (identical for chain-shaped gold workflows).
* The zero-aligned conventions above.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from metamorph.studies.workflow_perturb.metrics.alignment import TAU_ALIGN, align, similarity_matrix
from metamorph.studies.workflow_perturb.metrics.graph import as_workflow
from metamorph.studies.workflow_perturb.metrics.lexical import bleu, gleu
from metamorph.studies.workflow_perturb.metrics.order import (
    KENDALL_METHODS,
    kendall_tau_from_alignment,
    kendall_tau_gold_order,
)
from metamorph.studies.workflow_perturb.metrics.semantic import (
    SharedPassBERTScore,
    scorer_record,
    truncated_pairs,
    baseline_for,
    get_bert_scorer,
    shares_encoder,
)
from metamorph.studies.workflow_perturb.metrics.structural import (
    GRAPH_METHODS,
    chain_f1_from_alignment,
    graph_f1_from_alignment,
)

__all__ = [
    "CHUNK_PAIRS",
    "EncodingCounts",
    "score_workflow",
    "score_workflows",
]


def _resolve_scorer_spec(encoder: Any, bertscore: bool | tuple[str, int]) -> tuple[str, int] | None:
    if bertscore is False or bertscore is None:
        return None
    if isinstance(bertscore, tuple):
        return (str(bertscore[0]), int(bertscore[1]))
    info = getattr(encoder, "info", None)
    if info is None:
        raise ValueError(
            "BERTScore needs the encoder's local model path: pass an embeddings.Encoder, "
            "bertscore=(path, num_layers), or bertscore=False"
        )
    return (info.path, info.num_layers)


#: Pairs scored per chunk: token vectors are held only for the texts of the current chunk
#: (and of later chunks that use them again), so memory stays flat at any batch size.
CHUNK_PAIRS = 1000


@dataclass
class EncodingCounts:
    """How much encoding one :func:`score_workflows` call did.

    ``distinct_texts``: distinct step texts of the batch; ``encoded_texts``: texts that went
    through the encoder in this call (a text is encoded at most once; cached sentence vectors are
    reused when BERTScore does not need the text's tokens); ``bertscore_extra_texts``: texts
    whose BERTScore tokens needed a second transformer pass (bert_score's tokenization differed
    from the encoder's; see :class:`.semantic.SharedPassBERTScore`) — or, when BERTScore does not
    share the encoder's pass (another model or layer), every text bert_score encoded itself."""

    distinct_texts: int = 0
    encoded_texts: int = 0
    bertscore_extra_texts: int = 0


def score_workflows(
    pairs: Iterable[tuple[Any, Any]],
    encoder: Any,
    *,
    cache: Any = None,
    tau_align: float = TAU_ALIGN,
    prefilter: bool = False,
    graph_method: str = "induced",
    kendall_method: str = "gold_order",
    lowercase: bool = False,
    tokenization: str = "document",
    bertscore: bool | tuple[str, int] = True,
    rescale: bool = True,
    counts: EncodingCounts | None = None,
    chunk_pairs: int = CHUNK_PAIRS,
) -> list[dict[str, Any]]:
    """Every non-judge metric for each ``(gold, pred)`` pair (anything :func:`as_workflow` accepts).

    Each distinct step text of the batch goes through the encoder once: with the default
    BERTScore (the encoder's own directory at its last layer) one forward pass gives the sentence
    vector for the alignment and the token vectors for BERTScore
    (:meth:`metamorph.embeddings.Encoder.encode_with_tokens`, :class:`.semantic.SharedPassBERTScore`
    — bert_score's numbers without its second copy of the model). Pairs are processed in chunks
    of ``chunk_pairs``; token vectors are dropped after the last chunk that uses them. Sentence
    vectors go through ``cache`` (:class:`metamorph.embeddings.EmbeddingCache`; a private one when
    None). ``encoder`` needs ``name`` and ``encode`` (:class:`metamorph.embeddings.Encoder`);
    ``bertscore`` is True (the encoder's directory and last layer), ``(model_path, num_layers)``
    (another model: scored by ``bert_score.BERTScorer`` on all pairs at once), or False
    (BERTScore = None, reason ``"disabled"``); ``rescale`` applies the baseline of :mod:`.semantic`
    (App. B.4). ``prefilter`` (:func:`.alignment.align`), ``graph_method``
    (:data:`.structural.GRAPH_METHODS`) and ``kendall_method`` (:data:`.order.KENDALL_METHODS`)
    select the variants, ``lowercase``/``tokenization`` the BLEU/GLEU tokens (:mod:`.lexical`);
    the defaults are the paper's (App. B). ``counts`` (an :class:`EncodingCounts`) receives the
    encoding counts. Scores are reproducible for the same pairs and ``chunk_pairs``; another
    chunking batches the texts differently, which moves similarities by float32 noise (~1e-7:
    sentence-transformers pads per batch). Returns one flat dict per pair (see :func:`score_workflow`). Raises
    ``ValueError`` for an unknown method.
    source: §4, App. B.
    """
    from metamorph.embeddings import EmbeddingCache

    if graph_method not in GRAPH_METHODS:
        raise ValueError(f"graph_method must be one of {GRAPH_METHODS}, not {graph_method!r}")
    if kendall_method not in KENDALL_METHODS:
        raise ValueError(f"kendall_method must be one of {KENDALL_METHODS}, not {kendall_method!r}")
    wfs = [(as_workflow(g), as_workflow(p)) for g, p in pairs]
    cache = cache if cache is not None else EmbeddingCache()
    counts = counts if counts is not None else EncodingCounts()
    step = max(1, chunk_pairs)
    spans = [(a, min(a + step, len(wfs))) for a in range(0, len(wfs), step)]
    chunk_texts = [list(dict.fromkeys(t for g, p in wfs[a:b] for t in (*g.nodes, *p.nodes))) for a, b in spans]
    counts.distinct_texts += len({t for ts in chunk_texts for t in ts})

    scorer_spec = _resolve_scorer_spec(encoder, bertscore)
    bs_pairs: list[tuple[str, str]] = []
    bs_slices: list[tuple[int, int]] = []
    for g, p in wfs:
        start = len(bs_pairs)
        if scorer_spec is not None and g.nodes and p.nodes:
            bs_pairs.extend(truncated_pairs(g.nodes, p.nodes))
        bs_slices.append((start, len(bs_pairs)))
    bs_f = np.zeros(len(bs_pairs))
    baseline = baseline_path = None  # resolved only when some pair is scored
    if bs_pairs and rescale:
        info = getattr(encoder, "info", None)
        baseline_path, baseline = baseline_for(getattr(info, "name", None), *scorer_spec)
    # chunk i scores BERTScore pairs bs_pairs[lo:hi] = chunk_bs[i]; bs_last[text] = last chunk scoring it
    chunk_bs = [(bs_slices[a][0], bs_slices[b - 1][1]) for a, b in spans]
    bs_last = {t: i for i, (lo, hi) in enumerate(chunk_bs) for pair in bs_pairs[lo:hi] for t in pair}
    shared = None
    if bs_pairs and shares_encoder(encoder, scorer_spec):
        shared = SharedPassBERTScore(encoder, baseline_path)
    elif bs_pairs:
        scorer = get_bert_scorer(*scorer_spec, baseline_path=baseline_path)
        _, _, f = scorer.score([p for _, p in bs_pairs], [g for g, _ in bs_pairs])
        bs_f[:] = _clip(f)
        counts.bertscore_extra_texts += len({t for pair in bs_pairs for t in pair})

    provenance = {
        **(
            encoder.info.as_record()
            if hasattr(encoder, "info")
            else {
                "encoder": encoder.name,
                "encoder_path": None,
                "encoder_source": None,
                "encoder_num_layers": None,
                "encoder_fallback_reason": None,
            }
        ),
        "tau_align": tau_align,
        "align_prefilter": prefilter,
        "graph_method": graph_method,
        "kendall_method": kendall_method,
        "lexical_lowercase": lowercase,
        "lexical_tokenizer": (
            "nltk punkt (untrained) + NLTKWordTokenizer on the joined steps"
            if tokenization == "document"
            else "nltk.NLTKWordTokenizer per step"
        ),
        **scorer_record(encoder, scorer_spec, baseline),
    }
    results = []
    for ci, ((lo, hi), texts) in enumerate(zip(chunk_bs, chunk_texts)):
        if shared is not None:
            # a text BERTScore needs now or later is encoded with its tokens where it first
            # appears, and its tokens are kept until the last chunk that scores it
            need = [t for t in texts if bs_last.get(t, -1) >= ci and t not in shared]
            if need:
                vecs, tokens, ids = encoder.encode_with_tokens(need)
                for t, v in zip(need, vecs):
                    cache.put(encoder.name, t, v)
                shared.add(need, tokens, ids)
                counts.encoded_texts += len(need)
            if hi > lo:
                _, _, f = shared.score([p for _, p in bs_pairs[lo:hi]], [g for g, _ in bs_pairs[lo:hi]])
                bs_f[lo:hi] = _clip(f)
            shared.drop([t for t in texts if bs_last.get(t) == ci])
        misses = cache.misses
        vecs = cache.embed(encoder, texts) if texts else np.zeros((0, 0), dtype=np.float32)
        counts.encoded_texts += cache.misses - misses
        row = {t: i for i, t in enumerate(texts)}
        a, b = spans[ci]
        for (g, p), (x, y) in zip(wfs[a:b], bs_slices[a:b]):
            results.append(
                _score_pair(
                    g,
                    p,
                    vecs,
                    row,
                    bs_f[x:y],
                    scorer_spec,
                    tau_align,
                    prefilter,
                    graph_method,
                    kendall_method,
                    lowercase,
                    tokenization,
                    provenance,
                )
            )
    if shared is not None:
        counts.bertscore_extra_texts += shared.fallback_texts
    return results


def _clip(f) -> np.ndarray:
    # float32 cosine arithmetic can put an identical pair a hair above 1 (1.00000004): clip to 1
    return np.minimum(f.detach().cpu().numpy().astype(np.float64), 1.0)


def _score_pair(
    g,
    p,
    vecs,
    row,
    bs_f,
    scorer_spec,
    tau_align,
    prefilter,
    graph_method,
    kendall_method,
    lowercase,
    tokenization,
    provenance,
) -> dict[str, Any]:
    if g.nodes and p.nodes:
        sim = similarity_matrix(vecs[[row[t] for t in g.nodes]], vecs[[row[t] for t in p.nodes]])
    else:
        sim = np.zeros((len(g.nodes), len(p.nodes)))
    al = align(sim, tau_align, prefilter=prefilter)
    ch = chain_f1_from_alignment(al)
    gr = graph_f1_from_alignment(g.edges, p.edges, al, graph_method)
    if kendall_method == "gold_order":
        tau, tau_reason = kendall_tau_gold_order(sim)
    else:
        tau, tau_reason = kendall_tau_from_alignment(al)
    if not g.nodes:
        tau_reason = "empty_gold"
    bl, bl_reason = bleu(g.nodes, p.nodes, lowercase, tokenization)
    gl, gl_reason = gleu(g.nodes, p.nodes, lowercase, tokenization)
    if not g.nodes:
        bl = gl = None
        bl_reason = gl_reason = "empty_gold"
    if scorer_spec is None:
        bs, bs_reason = None, "disabled"
    elif not g.nodes:
        bs, bs_reason = None, "empty_gold"
    elif not p.nodes:
        bs, bs_reason = 0.0, "empty_candidate"
    else:
        bs, bs_reason = float(np.mean(bs_f)), None
    return {
        "n_gold_steps": len(g.nodes),
        "n_pred_steps": len(p.nodes),
        "n_aligned": len(al),
        "chain_precision": ch["precision"],
        "chain_recall": ch["recall"],
        "chain_f1": ch["f1"],
        "chain_lis": ch["lis"],
        "chain_reason": ch["reason"],
        "graph_precision": gr["precision"],
        "graph_recall": gr["recall"],
        "graph_f1": gr["f1"],
        "graph_common_nodes": gr["common_nodes"],
        "graph_common_edges": gr["common_edges"],
        "graph_reason": gr["reason"],
        "pred_invalid_edges": gr["pred_invalid_edges"],
        "bleu": bl,
        "bleu_reason": bl_reason,
        "gleu": gl,
        "gleu_reason": gl_reason,
        "bertscore_f1": bs,
        "bertscore_reason": bs_reason,
        "bertscore_pairs": len(bs_f),
        "kendall_tau": tau,
        "kendall_tau_reason": tau_reason,
        "aligned_pairs": [[gi, pj, round(s, 6)] for gi, pj, s in al.pairs],
        **provenance,
    }


def score_workflow(gold: Any, pred: Any, encoder: Any, **kwargs: Any) -> dict[str, Any]:
    """Every non-judge metric of one candidate against one gold workflow, as one flat dict.

    Keys: ``n_gold_steps``, ``n_pred_steps``, ``n_aligned``; ``chain_{precision,recall,f1,lis,reason}``;
    ``graph_{precision,recall,f1,common_nodes,common_edges,reason}``, ``pred_invalid_edges``;
    ``bleu``/``gleu`` (+ ``_reason``); ``bertscore_f1`` (+ ``_reason``, ``bertscore_pairs``);
    ``kendall_tau`` (+ ``_reason``); ``aligned_pairs`` ``[[gold_i, pred_j, sim], ...]``; and the
    provenance ``encoder``, ``encoder_path``, ``encoder_source``, ``encoder_num_layers``,
    ``encoder_fallback_reason``, ``tau_align``, ``align_prefilter``, ``graph_method``, ``kendall_method``,
    ``lexical_lowercase``, ``lexical_tokenizer``, ``bertscore_model``, ``bertscore_model_path``,
    ``bertscore_num_layers``, ``bertscore_rescaled`` (True iff a baseline was applied),
    ``bertscore_baseline`` (``packaged:<file>`` / ``runtime:embedded_goldens`` / None), ``bertscore_idf``.
    A ``*_reason`` is None when the value is defined normally. Keyword arguments as
    :func:`score_workflows`.
    """
    return score_workflows([(gold, pred)], encoder, **kwargs)[0]
