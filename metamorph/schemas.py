"""Schema machinery shared by every study: :func:`validate_frame`, the UI's column list, and the
per-generation lineage columns (:class:`GenerationRecord`), declared once.

Each study's tables are declared in ``metamorph/studies/<study>/schemas.py``. Every
``pa.Field`` carries a description (shown in the Dagster UI).
"""

from __future__ import annotations

import pandas as pd
import pandera.errors as pa_errors
import pandera.pandas as pa
from pandera.typing.pandas import Series


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


def require_columns(df: pd.DataFrame, columns, what: str) -> None:
    """Raise ``ValueError`` naming ``what`` unless ``df`` is a DataFrame holding every column of
    ``columns`` (the message lists the missing ones and the columns present)."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing required column(s) {missing}; has {list(df.columns)}")


def table_schema_metadata(model: type[pa.DataFrameModel]):
    """Columns + descriptions of ``model`` as ``(name, dtype, description)`` triples (for the UI)."""
    schema = model.to_schema()
    return [(name, str(col.dtype), col.description or "") for name, col in schema.columns.items()]


class StrictModel(pa.DataFrameModel):
    """Base of every table schema: no undeclared column (``strict``), dtypes coerced."""

    class Config:
        strict = True
        coerce = True


class GenerationRecord(StrictModel):
    """The lineage of one generation, shared by every study's generation table (columns of
    :func:`metamorph.runner.generation_frame`): from any metric cell, ``generation_key`` leads to
    the exact request and the raw completion."""

    generation_key: Series[str] = pa.Field(str_length={"min_value": 64, "max_value": 64},
                                           description="Generation cache key (sha256 of the canonical request).")
    request_json: Series[str] = pa.Field(description="The exact request (messages, params, document hash); no secrets.")
    response_text: Series[str] = pa.Field(nullable=True, description="Raw completion text; null when the call failed.")
    finish_reason: Series[str] = pa.Field(nullable=True, description="stop / length / ... as reported (length = cut at max_tokens).")
    prompt_tokens: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=0, description="Prompt tokens (provider usage, or counted with the model's tokenizer).")
    completion_tokens: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=0, description="Completion tokens reported by the provider.")
    latency_s: Series[float] = pa.Field(nullable=True, ge=0, description="Latency of the call in seconds (of the original call for cache hits).")
    model_version: Series[str] = pa.Field(nullable=True, description="Provider-reported resolved model version.")
    system_fingerprint: Series[str] = pa.Field(nullable=True, description="OpenAI system_fingerprint when given.")
    cache_hit: Series[bool] = pa.Field(description="Served from the generation cache in this run.")
    error: Series[str] = pa.Field(nullable=True, description="Error of the call (never a completion).")
