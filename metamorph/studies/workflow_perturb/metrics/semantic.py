"""Semantic metric: BERTScore F1 (App. B.4).

``bert_score.BERTScorer`` on the local encoder directory (``model_type=<path>``,
``num_layers`` = the encoder's last layer, e.g. 6 for MiniLM-L6), ``idf=False``,
``rescale_with_baseline=False`` (the baseline files are not local). Order-preserving truncation:
pairs ``(gold[i], pred[i])`` for ``i < min(|gold|, |pred|)``; the score is the mean F1 over those
pairs. Model name/path, layer and ``rescaled=False`` are recorded in every result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_SCORERS: dict[tuple[str, int], Any] = {}


def get_bert_scorer(model_path: str, num_layers: int, batch_size: int = 64):
    """A cached ``bert_score.BERTScorer`` on a local model directory (no idf, no rescaling)."""
    key = (str(model_path), int(num_layers))
    if key not in _SCORERS:
        from metamorph.embeddings import _force_offline

        _force_offline()
        from bert_score import BERTScorer

        _SCORERS[key] = BERTScorer(model_type=str(model_path), num_layers=int(num_layers), batch_size=batch_size,
                                   idf=False, rescale_with_baseline=False, device="cpu")
    return _SCORERS[key]


def _truncated_pairs(gold: Sequence[str], pred: Sequence[str]) -> list[tuple[str, str]]:
    n = min(len(gold), len(pred))
    return [(gold[i], pred[i]) for i in range(n)]


def bertscore_f1(gold_steps: Sequence[str], pred_steps: Sequence[str], scorer) -> tuple[float | None, str | None]:
    """Mean BERTScore F1 over the order-preserving pairs ``(gold[i], pred[i])``, ``i < min(|gold|, |pred|)``."""
    if not gold_steps:
        return None, "empty_gold"
    if not pred_steps:
        return 0.0, "empty_candidate"
    pairs = _truncated_pairs(gold_steps, pred_steps)
    _, _, f = scorer.score([p for _, p in pairs], [g for g, _ in pairs])
    return min(float(f.mean().item()), 1.0), None  # float32 rounding can exceed 1 by ~1e-7


def _scorer_record(encoder: Any, scorer_spec: tuple[str, int] | None) -> dict[str, Any]:
    info = getattr(encoder, "info", None)
    if scorer_spec is None:
        return {"bertscore_model": None, "bertscore_model_path": None, "bertscore_num_layers": None,
                "bertscore_rescaled": False, "bertscore_idf": False}
    return {"bertscore_model": getattr(info, "name", None) or scorer_spec[0], "bertscore_model_path": scorer_spec[0],
            "bertscore_num_layers": scorer_spec[1], "bertscore_rescaled": False, "bertscore_idf": False}
