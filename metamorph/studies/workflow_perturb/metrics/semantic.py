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
and averages P, R and F. For MiniLM the table is packaged
(``data/bertscore_baseline_all-MiniLM-L6-v2.tsv``, written by
``scripts/bertscore_baseline.py``); for any other encoder the row of the layer used is computed
at run time by the same function (a one-off few-second cost, cached per process). The scorer is
then ``BERTScorer(..., lang="en", rescale_with_baseline=True, baseline_path=<table>)`` — the
library's own rescaling code. Rescaled scores can be negative (a pair less similar than the
average unrelated pair). Every result records ``bertscore_rescaled`` (True only when a baseline
was applied) and ``bertscore_baseline`` (where it came from). ``rescale=False`` is the raw
BERTScore of the rule before issue #8.

source: App. B.4.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

#: Unrelated step pairs drawn for a baseline.
BASELINE_PAIRS = 2000
#: Seed of the pair draw.
BASELINE_SEED = 0
_PACKAGED = {"sentence-transformers/all-MiniLM-L6-v2": "bertscore_baseline_all-MiniLM-L6-v2.tsv"}

_SCORERS: dict[tuple[str, int, str | None], Any] = {}
_RUNTIME_BASELINES: dict[tuple[str, int], str] = {}


def baseline_pairs(n_pairs: int = BASELINE_PAIRS, seed: int = BASELINE_SEED) -> list[tuple[str, str]]:
    """``n_pairs`` (candidate, reference) pairs of steps from two different embedded goldens,
    drawn without replacement with ``random.Random(seed)`` from all such pairs (ordered by golden
    then step position) — all of them when there are fewer."""
    from metamorph.studies.workflow_perturb.goldens import embedded_goldens

    gs = embedded_goldens()
    pool = [(a, b) for i, g in enumerate(gs) for h in gs[i + 1:] for a in g.nodes for b in h.nodes]
    if len(pool) <= n_pairs:
        return pool
    return random.Random(seed).sample(pool, n_pairs)


def compute_baseline(model_path: str, layers: Sequence[int], pairs: Sequence[tuple[str, str]] | None = None,
                     batch_size: int = 64) -> list[tuple[int, float, float, float]]:
    """Mean unrescaled BERTScore ``(layer, P, R, F)`` of ``pairs`` (default :func:`baseline_pairs`)
    at each layer of ``layers`` (bert_score's baseline definition, App. B.4)."""
    from metamorph.embeddings import prepare_hf

    prepare_hf()
    from bert_score import BERTScorer

    pairs = list(pairs) if pairs is not None else baseline_pairs()
    out = []
    for layer in layers:
        sc = BERTScorer(model_type=str(model_path), num_layers=int(layer), batch_size=batch_size, idf=False,
                        rescale_with_baseline=False, device="cpu")
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
        _SCORERS[key] = BERTScorer(model_type=str(model_path), num_layers=int(num_layers), batch_size=batch_size,
                                   idf=False, device="cpu", **kw)
    return _SCORERS[key]


def _truncated_pairs(gold: Sequence[str], pred: Sequence[str]) -> list[tuple[str, str]]:
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
    pairs = _truncated_pairs(gold_steps, pred_steps)
    _, _, f = scorer.score([p for _, p in pairs], [g for g, _ in pairs])
    return min(float(f.mean().item()), 1.0), None


def _scorer_record(encoder: Any, scorer_spec: tuple[str, int] | None, baseline: str | None = None) -> dict[str, Any]:
    info = getattr(encoder, "info", None)
    if scorer_spec is None:
        return {"bertscore_model": None, "bertscore_model_path": None, "bertscore_num_layers": None,
                "bertscore_rescaled": False, "bertscore_baseline": None, "bertscore_idf": False}
    return {"bertscore_model": getattr(info, "name", None) or scorer_spec[0], "bertscore_model_path": scorer_spec[0],
            "bertscore_num_layers": scorer_spec[1], "bertscore_rescaled": baseline is not None,
            "bertscore_baseline": baseline, "bertscore_idf": False}
