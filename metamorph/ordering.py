"""Canonical ordering of study levels (formats txt, md, json, csv; wrappers plain … deliberate).

A study binds its order once (``LevelOrder("format", FORMAT_ORDER)``) and sorts every output
table with it, so tables and plots list levels in the paper's order, unknown levels after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

__all__ = [
    "LevelOrder",
    "canonical_key",
    "ordered",
    "sort_frame",
]


def canonical_key(value: str, order: Sequence[str]) -> tuple[int, str]:
    """Sort key: position in ``order``, unknown values after it alphabetically."""
    return (order.index(value) if value in order else len(order), str(value))


def ordered(values: Iterable[str], order: Sequence[str]) -> list[str]:
    """Distinct ``values`` in canonical order."""
    return sorted(set(values), key=lambda v: canonical_key(v, order))


def sort_frame(df: pd.DataFrame, by: Sequence[str], column: str, order: Sequence[str]) -> pd.DataFrame:
    """Stable sort of ``df`` by ``by``, with ``column`` in canonical ``order``; index reset."""
    if column in by:
        df = df.assign(_ck=df[column].map(lambda v: canonical_key(v, order)[0]))
        keys = [("_ck" if c == column else c) for c in by] + [column]
        return df.sort_values(keys, kind="mergesort").drop(columns="_ck").reset_index(drop=True)
    return df.sort_values(list(by), kind="mergesort").reset_index(drop=True)


@dataclass(frozen=True)
class LevelOrder:
    """The canonical order of one level column (e.g. ``format`` in txt, md, json, csv)."""

    column: str
    order: tuple[str, ...]

    def key(self, value: str) -> tuple[int, str]:
        """:func:`canonical_key` of ``value`` in this order."""
        return canonical_key(value, self.order)

    def ordered(self, values: Iterable[str]) -> list[str]:
        """Distinct ``values`` in this order (:func:`ordered`)."""
        return ordered(values, self.order)

    def sort(self, df: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
        """``df`` sorted by ``by`` with this level column in order (:func:`sort_frame`)."""
        return sort_frame(df, by, self.column, self.order)
