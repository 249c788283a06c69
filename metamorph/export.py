"""Writing tables for people: spreadsheet exports that cannot run formulas, and markdown tables
whose cells cannot inject markup. Model output and dataset text are untrusted in both.

* :func:`spreadsheet_safe` / :func:`write_csv` — the OWASP rule against CSV (formula) injection
  (owasp.org/www-community/attacks/CSV_Injection): a text cell starting with ``=``, ``+``, ``-``,
  ``@``, a tab or a carriage return gets a leading apostrophe, so Excel, LibreOffice and Google
  Sheets show it as text instead of evaluating it. Numbers are left alone (``-3`` stays a number;
  the text ``"-3"`` becomes ``"'-3"``). Any other spreadsheet writer (an XLSX one) must go through
  :func:`spreadsheet_safe` too.
* :func:`markdown_cell` / :func:`markdown_table` — a cell shown in a markdown table (the Dagster UI
  previews) is one line with the markdown and HTML characters backslash-escaped, so a reply such as
  ``<img src=x onerror=...>``, ``![t](http://...)`` or ``a | b`` is shown as typed, never rendered.
* :func:`display_float` — a number as the tables show it (a percentage to one decimal, anything else
  to four significant digits), for the metadata and JSON records shown beside them.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "FLOAT_DIGITS",
    "FORMULA_PREFIXES",
    "MISSING",
    "PCT_DECIMALS",
    "display_float",
    "js_length",
    "markdown_cell",
    "markdown_table",
    "spreadsheet_cell",
    "spreadsheet_safe",
    "write_csv",
]

#: Decimals of a percentage (or percentage points) shown as float metadata.
PCT_DECIMALS = 1
#: Significant digits of any other float shown as metadata (p-values, correlations, USD).
FLOAT_DIGITS = 4


def display_float(value: float, percent: bool, digits: int = FLOAT_DIGITS) -> float:
    """``value`` as a table shows it: :data:`PCT_DECIMALS` decimals for a percentage, else ``digits``
    significant digits (30.555555555555554 % → 30.6; 0.0123456 → 0.01235). NaN and ±inf are
    returned as they are."""
    v = float(value)
    if v != v or v in (float("inf"), float("-inf")):
        return v
    return round(v, PCT_DECIMALS) if percent else float(f"{v:.{digits}g}")


#: First characters that make a spreadsheet evaluate a cell (OWASP CSV injection).
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")

#: Characters escaped with a backslash in a markdown cell (CommonMark allows escaping any ASCII
#: punctuation; these are the ones that start markup, HTML, entities or a table column).
_MARKDOWN_SPECIAL = frozenset("\\`*_[]<>|~&!#")


def spreadsheet_cell(value: Any) -> Any:
    """``value`` with a leading ``'`` when it is text starting with one of :data:`FORMULA_PREFIXES`;
    anything else unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def spreadsheet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with :func:`spreadsheet_cell` applied to every text cell and to the column
    names (numeric columns are untouched)."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object or pd.api.types.is_string_dtype(out[c].dtype):
            out[c] = out[c].map(spreadsheet_cell)
    out.columns = [spreadsheet_cell(c) for c in out.columns]
    return out


def write_csv(df: pd.DataFrame, path: str | Path) -> Path:
    """Write ``df`` (no index) to ``path`` as UTF-8 CSV after :func:`spreadsheet_safe`, every text
    cell in double quotes (OWASP; a bare CR inside a cell otherwise breaks the record); returns the path."""
    path = Path(path)
    spreadsheet_safe(df).to_csv(path, index=False, quoting=csv.QUOTE_NONNUMERIC)
    return path


def markdown_cell(value: Any) -> Any:
    """A text value as one markdown-table line: line breaks shown as ``↵``, the characters of
    ``\\`*_[]<>|~&!#`` backslash-escaped (rendered as themselves). Non-text values unchanged."""
    if not isinstance(value, str):
        return value
    text = " ↵ ".join(value.splitlines())
    return "".join("\\" + ch if ch in _MARKDOWN_SPECIAL else ch for ch in text)


def js_length(text: str) -> int:
    """``text``'s length as JavaScript counts it (UTF-16 code units: a character outside the BMP
    counts 2) — what the Dagster UI compares with its limit for markdown shown in place."""
    return len(text.encode("utf-16-le")) // 2


#: How :func:`markdown_table` shows a missing value.
MISSING = "–"


def markdown_table(df: pd.DataFrame, max_chars: int | None = None, compact: bool = False) -> str:
    """``df`` as a GitHub markdown table with every text cell (and column name) through
    :func:`markdown_cell`; text longer than ``max_chars`` is cut to ``max_chars`` characters
    (ending in ``…``) before escaping. A missing value (``None``, ``NaN``, ``pd.NA``) is shown as
    :data:`MISSING` in every column (pandas would print ``nan`` or ``<NA>``, and the UI drops
    ``<NA>`` as an HTML tag). ``"_(no rows)_"`` for an empty frame. ``compact``: cells not padded
    to their column's width (the same table when rendered, in fewer characters; a float in ``g``
    format, 6 significant digits, as the padded table prints it)."""
    if df.empty:
        return "_(no rows)_"

    def cell(v: Any) -> Any:
        if isinstance(v, str) and max_chars is not None and len(v) > max_chars:
            v = v[: max_chars - 1] + "…"
        return markdown_cell(v)

    shown = df.copy()
    for c in shown.columns:
        if shown[c].dtype == object or pd.api.types.is_string_dtype(shown[c].dtype):
            shown[c] = shown[c].map(cell)
        missing = shown[c].isna()
        if missing.any():
            shown[c] = shown[c].astype(object).where(~missing, MISSING)
    shown.columns = [markdown_cell(str(c)) for c in shown.columns]
    if compact:
        lines = ["| " + " | ".join(shown.columns) + " |", "|" + "|".join("---" for _ in shown.columns) + "|"]
        lines += [
            "| " + " | ".join(format(v, "g") if isinstance(v, float) else str(v) for v in row) + " |"
            for row in shown.itertuples(index=False)
        ]
        return "\n".join(lines)
    return shown.to_markdown(index=False)
