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
answer — except that a run does not count it among the calls that failed at the provider, and a
value with nothing measurable says it was not sent (:func:`every_call_failed` with ``not_sent``),
never that its calls failed.
"""

from __future__ import annotations

import pandas as pd

__all__ = [
    "CALL_ERROR",
    "NOT_SENT",
    "every_call_failed",
    "is_call_error",
    "is_not_sent",
    "no_reply_parsed",
    "not_sent",
]

#: The extraction reason of a generation whose call failed at the provider.
CALL_ERROR = "call_error"

#: How the error of a request that was not sent begins.
NOT_SENT = "not sent: "


def not_sent(ingestion: str, fmt: str, media_type: str) -> str:
    """``"not sent: anthropic_document cannot take docx (<media type>); not measurable"``: the error
    of a generation whose document the ingestion path cannot send as a file."""
    return f"{NOT_SENT}{ingestion} cannot take {fmt} ({media_type}); not measurable"


def every_call_failed(n: int, not_sent: int = 0) -> str:
    """Why a slice of ``n`` generations, each a call error, has nothing to measure; ``not_sent`` of
    them were requests never sent (:data:`NOT_SENT`):

    * none: ``"not measurable: every call failed (N of N)"``;
    * all: ``"not measurable: not sent (N of N requests)"``;
    * some: ``"not measurable: every call failed or was not sent (F failed, S not sent, of N)"``.
    """
    if not_sent >= n:
        return f"not measurable: not sent ({n} of {n} requests)"
    if not_sent:
        return f"not measurable: every call failed or was not sent ({n - not_sent} failed, {not_sent} not sent, of {n})"
    return f"not measurable: every call failed ({n} of {n})"


def no_reply_parsed(n: int) -> str:
    """``"not measurable: no reply parsed (N of N unparseable)"``: the metric needs parsed replies and
    none of the slice's ``n`` replies parsed."""
    return f"not measurable: no reply parsed ({n} of {n} unparseable)"


def is_not_sent(error: pd.Series) -> pd.Series:
    """Per row, whether the generation ``error`` says the request was not sent (begins
    :data:`NOT_SENT`; a bool Series, null is False)."""
    return error.astype("string").str.startswith(NOT_SENT).fillna(False).astype(bool)


def is_call_error(reason: pd.Series) -> pd.Series:
    """Per row, whether the extraction ``reason`` is :data:`CALL_ERROR` (a bool Series; null is False)."""
    return reason.eq(CALL_ERROR).fillna(False).astype(bool)
