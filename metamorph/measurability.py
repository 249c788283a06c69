"""Call errors are not answers: the shared texts and helpers of every study's metric tables.

A generation whose ``error`` is set (the provider failed after retries) is a *call error*. Its
extracted row keeps the reason :data:`CALL_ERROR`, but no metric counts it — neither in its
numerator nor in its denominator — and a comparison that needs the failed call (one item across
variants) is not made. Each metric table reports per row ``n_call_errors`` (the generations of
the row's slice left out as call errors) and, where nothing was measurable, a null value with a
``not_measurable`` text built here (:func:`every_call_failed`, :func:`no_reply_parsed`).
"""

from __future__ import annotations

import pandas as pd

__all__ = ["CALL_ERROR", "every_call_failed", "is_call_error", "no_reply_parsed"]

#: The extraction reason of a generation whose call failed at the provider.
CALL_ERROR = "call_error"


def every_call_failed(n: int) -> str:
    """``"not measurable: every call failed (N of N)"``: every generation of the slice (``n``) was a call error."""
    return f"not measurable: every call failed ({n} of {n})"


def no_reply_parsed(n: int) -> str:
    """``"not measurable: no reply parsed (N of N unparseable)"``: the metric needs parsed replies and
    none of the slice's ``n`` replies parsed."""
    return f"not measurable: no reply parsed ({n} of {n} unparseable)"


def is_call_error(reason: pd.Series) -> pd.Series:
    """Per row, whether the extraction ``reason`` is :data:`CALL_ERROR` (a bool Series; null is False)."""
    return reason.eq(CALL_ERROR).fillna(False).astype(bool)
