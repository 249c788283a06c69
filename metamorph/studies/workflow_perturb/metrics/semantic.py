"""Semantic metric: BERTScore F1 (App. B.4), rescaled with a baseline.

``bert_score.BERTScorer`` on the local encoder directory (``model_type=<path>``, ``num_layers`` =
the encoder's last layer, e.g. 6 for MiniLM-L6), ``idf=False``. Order-preserving truncation:
pairs ``(gold[i], pred[i])`` for ``i < min(|gold|, |pred|)``; the score is the mean F1 over those
pairs (App. B.4).

**Rescaling** (default, ``rescale=True``). The paper runs ``bert_score`` with ``lang="en"`` and
``rescale_with_baseline=True`` (roberta-large and its packaged baseline). bert_score rescales
each of P, R, F as ``(x − b)/(1 − b)`` (``BERTScorer.score``), where ``b`` is the mean score of
*unrelated* sentence pairs for that model and layer, read from a ``LAYER,P,R,F`` table
(``BERTScorer.baseline_vals``: row ``num_layers``). bert_score ships no baseline for the encoders
used here, so one is made from the project's own text — never from third-party data:
:func:`baseline_pairs` takes the steps of the 13 embedded goldens
(:func:`~metamorph.studies.workflow_perturb.goldens.embedded_goldens`), forms every pair of
steps from two *different* goldens (unrelated sentences), and draws :data:`BASELINE_PAIRS` of
them with ``random.Random(0)``; :func:`compute_baseline` scores them unrescaled at each layer
and averages P, R and F. For both installed encoders the table is packaged
(``data/bertscore_baseline_all-mpnet-base-v2.tsv``, ``data/bertscore_baseline_all-MiniLM-L6-v2.tsv``,
written by ``scripts/bertscore_baseline.py --encoder mpnet|minilm``); for any other encoder the row of the layer used is computed
at run time by the same function (a one-off few-second cost, cached per process). The scorer is
then ``BERTScorer(..., lang="en", rescale_with_baseline=True, baseline_path=<table>)`` — the
library's own rescaling code. Rescaled scores can be negative (a pair less similar than the
average unrelated pair). Every result records ``bertscore_rescaled`` (True only when a baseline
was applied) and ``bertscore_baseline`` (where it came from). ``rescale=False`` is the raw
BERTScore of the earlier rule.

source: App. B.4.
"""

from __future__ import annotations

import io
import random
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from metamorph.datasets import read_text

__all__ = [
    "BASELINE_PAIRS",
    "BASELINE_SEED",
    "SharedPassBERTScore",
    "baseline_for",
    "baseline_pairs",
    "bertscore_f1",
    "compute_baseline",
    "get_bert_scorer",
    "packaged_baseline",
    "scorer_record",
    "shares_encoder",
    "truncated_pairs",
    "write_baseline",
]

#: Unrelated step pairs drawn for a baseline.
BASELINE_PAIRS = 2000
#: Seed of the pair draw.
BASELINE_SEED = 0
_PACKAGED = {
    "sentence-transformers/all-MiniLM-L6-v2": "bertscore_baseline_all-MiniLM-L6-v2.tsv",
    "sentence-transformers/all-mpnet-base-v2": "bertscore_baseline_all-mpnet-base-v2.tsv",
}

_SCORERS: dict[tuple[str, int, str | None], Any] = {}
_RUNTIME_BASELINES: dict[tuple[str, int], str] = {}


def baseline_pairs(n_pairs: int = BASELINE_PAIRS, seed: int = BASELINE_SEED) -> list[tuple[str, str]]:
    """``n_pairs`` (candidate, reference) pairs of steps from two different embedded goldens,
    drawn without replacement with ``random.Random(seed)`` from all such pairs (ordered by golden
    then step position) — all of them when there are fewer."""
    from metamorph.studies.workflow_perturb.goldens import embedded_goldens

    gs = embedded_goldens()
    pool = [(a, b) for i, g in enumerate(gs) for h in gs[i + 1 :] for a in g.nodes for b in h.nodes]
    if len(pool) <= n_pairs:
        return pool
    return random.Random(seed).sample(pool, n_pairs)


def compute_baseline(
    model_path: str, layers: Sequence[int], pairs: Sequence[tuple[str, str]] | None = None, batch_size: int = 64
) -> list[tuple[int, float, float, float]]:
    """Mean unrescaled BERTScore ``(layer, P, R, F)`` of ``pairs`` (default :func:`baseline_pairs`)
    at each layer of ``layers`` (bert_score's baseline definition, App. B.4)."""
    from metamorph.embeddings import prepare_hf

    prepare_hf()
    from bert_score import BERTScorer

    pairs = list(pairs) if pairs is not None else baseline_pairs()
    out = []
    for layer in layers:
        sc = BERTScorer(
            model_type=str(model_path),
            num_layers=int(layer),
            batch_size=batch_size,
            idf=False,
            rescale_with_baseline=False,
            device="cpu",
        )
        p, r, f = sc.score([a for a, _ in pairs], [b for _, b in pairs])
        out.append((int(layer), float(p.mean()), float(r.mean()), float(f.mean())))
    return out


def write_baseline(rows: Sequence[tuple[int, float, float, float]], path: str | Path) -> Path:
    """Write ``rows`` as bert_score's baseline table ``LAYER,P,R,F`` (one row per layer from 0,
    so that row ``num_layers`` is that layer; missing layers are filled with NaN)."""
    path = Path(path)
    by_layer = {r[0]: r for r in rows}
    lines = ["LAYER,P,R,F"]
    for layer in range(max(by_layer) + 1):
        r = by_layer.get(layer)
        lines.append(f"{layer},{r[1]:.8f},{r[2]:.8f},{r[3]:.8f}" if r else f"{layer},nan,nan,nan")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def packaged_baseline(model_name: str | None) -> Path | None:
    """The packaged baseline table of ``model_name`` (e.g. MiniLM), or None."""
    fname = _PACKAGED.get(model_name or "")
    if fname is None:
        return None
    res = resources.files("metamorph.studies.workflow_perturb").joinpath("data", fname)
    return Path(str(res)) if res.is_file() else None


def baseline_for(model_name: str | None, model_path: str, num_layers: int) -> tuple[str, str]:
    """``(table path, provenance)`` of the baseline for this encoder and layer: the packaged
    table (``"packaged:<file>"``) or one computed now from :func:`baseline_pairs`
    (``"runtime:embedded_goldens"``, cached per process in a temporary file)."""
    packaged = packaged_baseline(model_name)
    if packaged is not None:
        return str(packaged), f"packaged:{packaged.name}"
    key = (str(model_path), int(num_layers))
    if key not in _RUNTIME_BASELINES:
        rows = compute_baseline(model_path, [num_layers])
        tmp = Path(tempfile.mkdtemp(prefix="metamorph-bsbase-")) / "baseline.tsv"
        _RUNTIME_BASELINES[key] = str(write_baseline(rows, tmp))
    return _RUNTIME_BASELINES[key], "runtime:embedded_goldens"


def get_bert_scorer(model_path: str, num_layers: int, batch_size: int = 64, baseline_path: str | None = None):
    """A cached ``bert_score.BERTScorer`` on a local model directory (no idf); rescaled with the
    table ``baseline_path`` when given (bert_score's own rescaling), raw otherwise."""
    key = (str(model_path), int(num_layers), baseline_path)
    if key not in _SCORERS:
        from metamorph.embeddings import prepare_hf

        prepare_hf()
        from bert_score import BERTScorer

        kw: dict[str, Any] = {"rescale_with_baseline": False}
        if baseline_path is not None:
            kw = {"rescale_with_baseline": True, "baseline_path": str(baseline_path), "lang": "en"}
        _SCORERS[key] = BERTScorer(
            model_type=str(model_path), num_layers=int(num_layers), batch_size=batch_size, idf=False, device="cpu", **kw
        )
    return _SCORERS[key]


def shares_encoder(encoder: Any, scorer_spec: tuple[str, int] | None) -> bool:
    """True when BERTScore can reuse ``encoder``'s own forward pass: ``scorer_spec`` is the
    encoder's directory at its last layer (the default) and the encoder can return token vectors
    (:meth:`metamorph.embeddings.Encoder.encode_with_tokens`)."""
    info = getattr(encoder, "info", None)
    return (
        scorer_spec is not None
        and info is not None
        and hasattr(encoder, "encode_with_tokens")
        and (str(info.path), int(info.num_layers)) == (str(scorer_spec[0]), int(scorer_spec[1]))
    )


class SharedPassBERTScore:
    """BERTScore from the token vectors of the sentence encoder's own forward pass.

    The same numbers as ``bert_score.BERTScorer(model_type=<encoder dir>, num_layers=<last layer>,
    idf=False[, rescale_with_baseline=True, baseline_path=<table>]).score(cands, refs)`` (bert_score
    0.3.13), without loading the weights a second time or encoding a text twice:

    * token ids: bert_score's own ``sent_encode`` (the slow tokenizer, ``model_max_length``
      truncation); a text whose ids differ from those of the encoder's pass (e.g. longer than
      the encoder's ``max_seq_length``) gets its vectors from :meth:`Encoder.token_vectors` on
      bert_score's ids (counted in :attr:`fallback_texts`);
    * idf off: weight 1 for every token, 0 for ``[CLS]``/``[SEP]`` (``BERTScorer.score``);
    * greedy matching: ``bert_score.utils.greedy_cos_idf`` itself, on batches of ``batch_size``
      consecutive pairs padded exactly as ``bert_cos_score_idf`` pads them (a padded position
      scores 0, so a pair's result depends on its batch when every cosine of a token is below
      0 — bert_score's behaviour, kept);
    * rescaling: ``(x − b)/(1 − b)`` with ``b`` = row ``num_layers`` of the baseline table, as
      ``BERTScorer.baseline_vals``.

    Token vectors are held per text (:meth:`add`) until :meth:`drop`.
    source: App. B.4; bert_score ``scorer.py``/``utils.py``.
    """

    def __init__(self, encoder: Any, baseline_path: str | None = None, batch_size: int = 64):
        from metamorph.embeddings import prepare_hf

        prepare_hf()
        import pandas as pd
        import torch
        from bert_score.utils import get_tokenizer

        self.encoder = encoder
        self.num_layers = int(encoder.info.num_layers)
        self.batch_size = batch_size
        self.tokenizer = get_tokenizer(str(encoder.info.path), use_fast=False)
        self._no_weight = {self.tokenizer.sep_token_id, self.tokenizer.cls_token_id}
        self.baseline_vals = None
        if baseline_path is not None:
            self.baseline_vals = torch.from_numpy(
                pd.read_csv(io.StringIO(read_text(baseline_path, "BERTScore baseline")))
                .iloc[self.num_layers]
                .to_numpy()
            )[1:].float()
        self._states: dict[str, tuple[Any, Any]] = {}
        self.fallback_texts = 0

    def __contains__(self, text: str) -> bool:
        return text in self._states

    def add(self, texts: Sequence[str], token_vectors: Sequence[Any], token_ids: Sequence[Sequence[int]]) -> None:
        """Keep the token vectors of ``texts`` (from :meth:`Encoder.encode_with_tokens`)."""
        from bert_score.utils import sent_encode

        redo: list[tuple[str, list[int]]] = []
        for text, vecs, ids in zip(texts, token_vectors, token_ids):
            want = sent_encode(self.tokenizer, text)
            if list(ids) == list(want):
                self._states[text] = (vecs, self._idf(want))
            else:
                redo.append((text, list(want)))
        if redo:
            self.fallback_texts += len(redo)
            for (text, want), vecs in zip(redo, self.encoder.token_vectors([w for _, w in redo])):
                self._states[text] = (vecs, self._idf(want))

    def _idf(self, ids: Sequence[int]):
        import torch

        return torch.tensor([0.0 if i in self._no_weight else 1.0 for i in ids], dtype=torch.float)

    def drop(self, texts: Sequence[str]) -> None:
        for t in texts:
            self._states.pop(t, None)

    def _padded(self, texts: Sequence[str]):
        import torch
        from torch.nn.utils.rnn import pad_sequence

        emb, idf = zip(*(self._states[t] for t in texts))
        lens = torch.tensor([e.size(0) for e in emb], dtype=torch.long)
        mask = torch.arange(int(lens.max()), dtype=torch.long).expand(len(lens), int(lens.max())) < lens.unsqueeze(1)
        return pad_sequence(emb, batch_first=True, padding_value=2.0), mask, pad_sequence(idf, batch_first=True)

    def score(self, cands: Sequence[str], refs: Sequence[str]):
        """``(P, R, F)`` float32 torch tensors, one value per ``(cands[i], refs[i])`` pair (every
        text must have been :meth:`add`-ed); rescaled when a baseline was given."""
        import torch
        from bert_score.utils import greedy_cos_idf

        preds = []
        with torch.no_grad():
            for s in range(0, len(refs), self.batch_size):
                p, r, f = greedy_cos_idf(
                    *self._padded(refs[s : s + self.batch_size]), *self._padded(cands[s : s + self.batch_size])
                )
                preds.append(torch.stack((p, r, f), dim=-1))
        out = torch.cat(preds, dim=0) if preds else torch.zeros((0, 3))
        if self.baseline_vals is not None:
            out = (out - self.baseline_vals) / (1 - self.baseline_vals)
        return out[..., 0], out[..., 1], out[..., 2]


def truncated_pairs(gold: Sequence[str], pred: Sequence[str]) -> list[tuple[str, str]]:
    """The order-preserving pairs ``(gold[i], pred[i])``, ``i < min(|gold|, |pred|)`` (BERTScore's pairs)."""
    n = min(len(gold), len(pred))
    return [(gold[i], pred[i]) for i in range(n)]


def bertscore_f1(gold_steps: Sequence[str], pred_steps: Sequence[str], scorer) -> tuple[float | None, str | None]:
    """Mean BERTScore F1 over the order-preserving pairs ``(gold[i], pred[i])``,
    ``i < min(|gold|, |pred|)``, with ``scorer`` (:func:`get_bert_scorer`; rescaled or not as it
    was built). ``(None, "empty_gold")`` / ``(0.0, "empty_candidate")``. Values above 1 from
    float32 rounding (~1e-7) are clipped to 1. source: App. B.4."""
    if not gold_steps:
        return None, "empty_gold"
    if not pred_steps:
        return 0.0, "empty_candidate"
    pairs = truncated_pairs(gold_steps, pred_steps)
    _, _, f = scorer.score([p for _, p in pairs], [g for g, _ in pairs])
    return min(float(f.mean().item()), 1.0), None


def scorer_record(encoder: Any, scorer_spec: tuple[str, int] | None, baseline: str | None = None) -> dict[str, Any]:
    """The ``bertscore_*`` provenance columns of a score row: model name and path, layer count,
    whether (and against which baseline) scores are rescaled, idf; all null / false when
    ``scorer_spec`` is ``None`` (BERTScore not computed)."""
    info = getattr(encoder, "info", None)
    if scorer_spec is None:
        return {
            "bertscore_model": None,
            "bertscore_model_path": None,
            "bertscore_num_layers": None,
            "bertscore_rescaled": False,
            "bertscore_baseline": None,
            "bertscore_idf": False,
        }
    return {
        "bertscore_model": getattr(info, "name", None) or scorer_spec[0],
        "bertscore_model_path": scorer_spec[0],
        "bertscore_num_layers": scorer_spec[1],
        "bertscore_rescaled": baseline is not None,
        "bertscore_baseline": baseline,
        "bertscore_idf": False,
    }
