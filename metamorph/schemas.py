"""pandera schemas for every intermediate and metric table, plus :func:`validate_frame`.

Each study has a module (``format_robustness`` for the intermediates, ``format_metrics`` for
the metric tables). Every ``pa.Field`` carries a description (shown in the Dagster UI).
"""

from __future__ import annotations

import pandas as pd
import pandera.errors as pa_errors
import pandera.pandas as pa


class SchemaViolation(ValueError):
    """A frame failed its schema; the message names the table, the columns and failing rows."""

    def __init__(self, table: str, failure_cases: pd.DataFrame):
        self.table = table
        self.failure_cases = failure_cases
        fc = failure_cases.copy()
        cols = ["column", "check", "index", "failure_case"]
        lines = [f"{table}: {len(fc)} schema failure(s)"]
        for _, r in fc[[c for c in cols if c in fc.columns]].head(20).iterrows():
            lines.append(f"  column={r.get('column')!s} check={r.get('check')!s} row={r.get('index')!s} "
                         f"value={str(r.get('failure_case'))[:120]}")
        if len(fc) > 20:
            lines.append(f"  ... and {len(fc) - 20} more")
        super().__init__("\n".join(lines))


def validate_frame(model: type[pa.DataFrameModel], df: pd.DataFrame, table: str | None = None) -> pd.DataFrame:
    """Validate ``df`` lazily against ``model`` and return the validated (coerced) frame.

    Raises :class:`SchemaViolation` listing every failing column/check/row (up to 20 shown).
    """
    try:
        return model.validate(df, lazy=True)
    except pa_errors.SchemaErrors as exc:
        raise SchemaViolation(table or model.__name__, exc.failure_cases) from None


def table_schema_metadata(model: type[pa.DataFrameModel]):
    """Columns + descriptions of ``model`` as ``(name, dtype, description)`` triples (for the UI)."""
    schema = model.to_schema()
    return [(name, str(col.dtype), col.description or "") for name, col in schema.columns.items()]
