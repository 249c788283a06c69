"""Ordering: Kendall's τ (§4.4, App. B.5).

Default: τ over the gold step order (:func:`kendall_tau_gold_order`, ``method="gold_order"``)
-------------------------------------------------------------------------------------------
Every gold step ``i`` (``x = i``, 0-based list order) gets the rank ``y_i`` = the position of the
candidate step it is assigned to by a one-to-one Hungarian assignment on the cosine-similarity
matrix **without** the 0.8 threshold (:func:`~metamorph.studies.workflow_perturb.metrics.alignment.align`
with ``tau=None``); gold steps left without a partner (there are ``n_gold − n_pred`` of them
when the candidate is shorter) all get the tied rank ``n_pred`` (after the last candidate step).
τ = ``scipy.stats.kendalltau(x, y)`` (τ-b, which corrects for those ties). A candidate step
without a gold partner does not enter.

Why: the literal §4.4 reading — τ over the aligned pairs only (``method="aligned"``, the earlier
rule) — gives τ = 1 for every order-preserving deletion or merge (mean 1.000 / 0.995
/ 0.994 under Compressed Steps on the shared sample), yet the paper reports 0.74 → 0.46 under
compression (§6), Δ_avg = 1.42 (compressed), 0.94 (missing) and 0.02 (description) (§5.1), and
gates Compressed Steps at τ < 0.65 (Table 1). Taking n = the gold steps penalises a merged or
missing step: the unmatched gold step sits after the whole candidate, so every later gold step
forms a discordant pair with it. No threshold, because Description Changes stay flat in the paper
(Δ 0.02) while its paraphrases do push Graph F1 down (Δ 0.29): a thresholded alignment would lose
paraphrased steps and move τ too. Means at 10/30/50 % and Δ_avg on the 300 WorFBench goldens of
the shared sample (deterministic operators, MiniLM):

============================================  ==================  ==================  =============
definition                                    Missing             Compressed          Description
============================================  ==================  ==================  =============
gold order, unmatched tied last (default)     .663 .368 .190 1.18 .683 .337 .094 1.47 1 1 1   0.00
(C − D)/(n_gold(n_gold − 1)/2), no threshold  .669 .334 .148 1.30 .669 .333 .149 1.30 1 1 1   0.00
gold order, unmatched tied last, τ ≥ 0.8      .663 .368 .190 1.18 .633 .267 .000 1.58 .98 .94 .92 0.16
aligned pairs only (literal §4.4)             1.00 .998 .987 0.03 1.00 .995 .994 0.02 1 1 1   0.00
paper                                         Δ 0.94              .74 .46 (.17) 1.42  Δ 0.02
============================================  ==================  ==================  =============

The default is the one closest to the paper on Compressed Steps (the trajectory and Δ) and
Description Changes, and it orders the two structural perturbations as the paper does
(compressed > missing); it overshoots Missing Steps (1.18 vs 0.94).

source: §4.4, §5.1, §6, Table 1 (App. B.5 is empty in the extracted text).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from metamorph.studies.workflow_perturb.metrics.alignment import Alignment, align

__all__ = [
    "KENDALL_METHODS",
    "gold_order_ranks",
    "kendall_tau",
    "kendall_tau_from_alignment",
    "kendall_tau_gold_order",
]

#: Kendall's τ variants (the first is the default; see the module docstring).
KENDALL_METHODS = ("gold_order", "aligned")


def kendall_tau(gold_indices: Sequence[float], pred_indices: Sequence[float]) -> tuple[float | None, str | None]:
    """Kendall's τ-b (``scipy.stats.kendalltau``) between paired gold and predicted positions.

    Returns ``(τ in [−1, 1], None)`` or ``(None, reason)`` when undefined: fewer than 2 pairs
    (``fewer_than_2_aligned_steps``), constant ranks on a side (``constant_ranks``). Raises
    ``ValueError`` when the two sequences differ in length. source: §4.4.
    """
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
    """The literal §4.4 τ (``method="aligned"``): :func:`kendall_tau` over the aligned pairs only."""
    return kendall_tau([g for g, _, _ in alignment.pairs], [p for _, p, _ in alignment.pairs])


def gold_order_ranks(alignment: Alignment) -> list[int]:
    """Rank of each gold step for :func:`kendall_tau_gold_order`: its partner's candidate
    position, or ``n_pred`` (tied, after the candidate) for a gold step without a partner."""
    g2p = alignment.gold_to_pred
    return [g2p.get(i, alignment.n_pred) for i in range(alignment.n_gold)]


def kendall_tau_gold_order(sim: Any) -> tuple[float | None, str | None]:
    """Kendall's τ over the gold step order (module docstring) from the similarity matrix
    ``sim`` (shape ``(n_gold, n_pred)``, rows = gold).

    Returns ``(τ, None)`` or ``(None, reason)``: ``empty_gold``, ``empty_candidate``,
    ``fewer_than_2_aligned_steps`` (one gold step), ``constant_ranks``. source: §4.4, §5.1, §6.
    """
    s = np.asarray(sim, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"similarity matrix must be 2-D, got shape {s.shape}")
    if s.shape[0] == 0:
        return None, "empty_gold"
    if s.shape[1] == 0:
        return None, "empty_candidate"
    al = align(s, None)
    return kendall_tau(list(range(al.n_gold)), gold_order_ranks(al))
