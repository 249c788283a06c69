"""Step alignment by embedding cosine similarity (App. B).

Both step lists are embedded (L2-normalised, :mod:`metamorph.embeddings`);
``sim[i, j] = cos(gold[i], pred[j])`` (**rows = gold, columns = pred**). A one-to-one
assignment maximising the total similarity is found with
:func:`scipy.optimize.linear_sum_assignment` and pairs with ``sim >= tau_align`` (0.8,
inclusive; compared in float64, no tolerance) are kept (:func:`align`).
By default (``prefilter=False``; App. B.1 steps 2–3 and B.2 step 1 assign first and keep the
assigned pairs at or above the threshold afterwards) the assignment runs on the raw matrix and is filtered afterwards; that reading can lose an eligible pair because the
raw optimum used a sub-threshold one (tested). ``prefilter=True`` (the earlier default)
sets entries below ``tau_align`` to 0 *before* the assignment, a maximum-weight matching over
eligible pairs only — the same as WorFBench's ``nx.max_weight_matching`` over above-threshold
pairs. On the shared WorFBench sample the two differ by at most 0.001 in any severity-table
mean. Exact ties are broken towards order-preserving pairs (a ``1e-9·|i/n_gold − j/n_pred|``
penalty in the objective only; thresholds use the raw similarity), so duplicated step texts align
in order. ``tau=None`` keeps every assigned pair (the alignment of Kendall's τ,
:mod:`~metamorph.studies.workflow_perturb.metrics.order`).

source: App. B.1 (steps 1–3), B.2 (step 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "TAU_ALIGN",
    "Alignment",
    "align",
    "similarity_matrix",
]

TAU_ALIGN = 0.8
_TIE_EPS = 1e-9


@dataclass(frozen=True)
class Alignment:
    """Aligned ``(gold_index, pred_index, similarity)`` triples (0-based), sorted by pred index;
    ``tau`` is the threshold used (``-inf`` for an unthresholded alignment)."""

    pairs: tuple[tuple[int, int, float], ...]
    n_gold: int
    n_pred: int
    tau: float = TAU_ALIGN

    @property
    def pred_to_gold(self) -> dict[int, int]:
        return {p: g for g, p, _ in self.pairs}

    @property
    def gold_to_pred(self) -> dict[int, int]:
        return {g: p for g, p, _ in self.pairs}

    def __len__(self) -> int:
        return len(self.pairs)


def similarity_matrix(gold_vecs: np.ndarray, pred_vecs: np.ndarray) -> np.ndarray:
    """Cosine similarities, rows = gold, columns = pred (vectors are normalised here again)."""
    g = np.asarray(gold_vecs, dtype=np.float64)
    p = np.asarray(pred_vecs, dtype=np.float64)
    if g.size == 0 or p.size == 0:
        return np.zeros((g.shape[0] if g.ndim == 2 else 0, p.shape[0] if p.ndim == 2 else 0))
    g = g / np.clip(np.linalg.norm(g, axis=1, keepdims=True), 1e-12, None)
    p = p / np.clip(np.linalg.norm(p, axis=1, keepdims=True), 1e-12, None)
    return g @ p.T


def align(sim: Any, tau: float | None = TAU_ALIGN, *, prefilter: bool = False) -> Alignment:
    """One-to-one alignment on ``sim`` (shape ``(n_gold, n_pred)``, cosine similarities), keeping
    assigned pairs with ``sim >= tau`` (every assigned pair when ``tau`` is None).

    See the module docstring for ``prefilter`` and the order-preserving tie-break. Raises
    ``ValueError`` for a matrix that is not 2-D or holds NaN/inf. source: App. B.1–B.2.
    """
    from scipy.optimize import linear_sum_assignment

    s = np.asarray(sim, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"similarity matrix must be 2-D, got shape {s.shape}")
    n_gold, n_pred = s.shape
    if n_gold == 0 or n_pred == 0:
        return Alignment((), n_gold, n_pred, tau)
    if not np.all(np.isfinite(s)):
        raise ValueError("similarity matrix contains NaN or inf")
    eligible = s >= tau if tau is not None else np.ones_like(s, dtype=bool)
    weights = np.where(eligible, s, 0.0) if prefilter else s.copy()
    gi = np.arange(n_gold)[:, None] / n_gold
    pj = np.arange(n_pred)[None, :] / n_pred
    weights = weights - _TIE_EPS * np.abs(gi - pj)
    rows, cols = linear_sum_assignment(weights, maximize=True)
    pairs = sorted(((int(g), int(p), float(s[g, p])) for g, p in zip(rows, cols) if eligible[g, p]), key=lambda t: t[1])
    return Alignment(tuple(pairs), n_gold, n_pred, tau if tau is not None else float("-inf"))
