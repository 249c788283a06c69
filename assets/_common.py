"""Materialization metadata helpers shared by every study's assets (Dagster concerns only)."""

from __future__ import annotations

import base64
import io

import dagster as dg
import pandas as pd
import pandera.pandas as pa

from metamorph.export import markdown_table
from metamorph.schemas import table_schema_metadata, validate_frame


def preview_md(df: pd.DataFrame, n: int = 10, max_chars: int = 80) -> dg.MetadataValue:
    """First ``n`` rows as a markdown table, long cells cut to ``max_chars``; model output and
    dataset text are escaped (:func:`metamorph.export.markdown_table`), never rendered as markup."""
    return dg.MetadataValue.md(markdown_table(df.head(n), max_chars))


def schema_md(model: type[pa.DataFrameModel]) -> dg.MetadataValue:
    """The table's columns with their pandera descriptions, for the UI."""
    return dg.MetadataValue.table_schema(dg.TableSchema(columns=[
        dg.TableColumn(name=n, type=t, description=d) for n, t, d in table_schema_metadata(model)]))


def figure_md(fig) -> dg.MetadataValue:
    """A matplotlib figure embedded as a base64 PNG (the plot-in-the-UI idiom)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return dg.MetadataValue.md(f"![plot](data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()})")


def validated_output(model: type[pa.DataFrameModel], df: pd.DataFrame, table: str,
                     metadata: dict | None = None) -> dg.Output:
    """Validate ``df`` (a failure raises and nothing is written) and wrap it with standard metadata."""
    df = validate_frame(model, df, table)
    md = {"dagster/row_count": dg.MetadataValue.int(len(df)), "preview": preview_md(df),
          "dagster/column_schema": schema_md(model).value}
    md.update(metadata or {})
    return dg.Output(df, metadata=md)


def create_lineage_views(warehouse, study: str, count_view: str) -> dg.MaterializeResult:
    """Run ``sql/<study>/lineage_views.sql`` on the warehouse (``warehouse``: a DuckDBResource)
    and report the rows of ``<study>.<count_view>`` and the SQL itself as metadata."""
    from metamorph.sql import sql_path

    sql = sql_path(study, "lineage_views").read_text()
    with warehouse.get_connection() as con:
        con.execute(sql)
        n = con.execute(f"SELECT count(*) FROM {study}.{count_view}").fetchall()[0][0]
    return dg.MaterializeResult(metadata={f"{count_view}_rows": dg.MetadataValue.int(int(n)),
                                          "sql": dg.MetadataValue.md(f"```sql\n{sql}\n```")})
