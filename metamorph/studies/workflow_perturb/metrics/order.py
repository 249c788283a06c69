"""Ordering: Kendall's τ over aligned steps (§4.4).

``scipy.stats.kendalltau`` (τ-b) between the gold indices and the predicted indices of the
aligned pairs (:func:`kendall_tau`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from metamorph.studies.workflow_perturb.metrics.alignment import Alignment


def kendall_tau(gold_indices: Sequence[float], pred_indices: Sequence[float]) -> tuple[float | None, str | None]:
    """Kendall's τ-b between paired gold and predicted positions; ``(None, reason)`` when undefined."""
    from scipy.stats import kendalltau

    x, y = list(gold_indices), list(pred_indices)
    if len(x) != len(y):
        raise ValueError("gold_indices and pred_indices differ in length")
    if len(x) < 2:
        return None, "fewer_than_2_aligned_steps"
    if len(set(x)) < 2 or len(set(y)) < 2:
        return None, "constant_ranks"
    tau = kendalltau(x, y).statistic
    if tau is None or not math.isfinite(float(tau)):
        return None, "undefined"
    return float(tau), None


def kendall_tau_from_alignment(alignment: Alignment) -> tuple[float | None, str | None]:
    return kendall_tau([g for g, _, _ in alignment.pairs], [p for _, p, _ in alignment.pairs])
