"""Canonical ordering of study levels (formats txt, md, json, csv; wrappers plain … deliberate)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd


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
