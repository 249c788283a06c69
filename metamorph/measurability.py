"""Call errors are not answers: the shared texts and helpers of every study's metric tables.

A generation whose ``error`` is set (the provider failed after retries) is a *call error*. Its
extracted row keeps the reason :data:`CALL_ERROR`, but no metric counts it — neither in its
numerator nor in its denominator — and a comparison that needs the failed call (one item across
variants) is not made. Each metric table reports per row ``n_call_errors`` (the generations of
the row's slice left out as call errors) and, where nothing was measurable, a null value with a
``not_measurable`` text built here (:func:`every_call_failed`, :func:`no_reply_parsed`).

A request an ingestion path cannot send (a document of a media type the provider does not take as
a file, :mod:`metamorph.providers.file_inputs`) is never sent: its generation row carries the
error :func:`not_sent` (``"not sent: …"``) and is handled as a call error everywhere — never an
answer — except that a run does not count it among the calls that failed at the provider.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["CALL_ERROR", "NOT_SENT", "every_call_failed", "is_call_error", "no_reply_parsed", "not_sent"]

#: The extraction reason of a generation whose call failed at the provider.
CALL_ERROR = "call_error"

#: How the error of a request that was not sent begins.
NOT_SENT = "not sent: "


def not_sent(ingestion: str, fmt: str, media_type: str) -> str:
    """``"not sent: anthropic_document cannot take docx (<media type>); not measurable"``: the error
    of a generation whose document the ingestion path cannot send as a file."""
    return f"{NOT_SENT}{ingestion} cannot take {fmt} ({media_type}); not measurable"


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
