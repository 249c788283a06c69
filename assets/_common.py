"""Materialization metadata helpers shared by every study's assets (Dagster concerns only)."""

from __future__ import annotations

import base64
import io

import dagster as dg
import pandas as pd
import pandera.pandas as pa

from metamorph.schemas import table_schema_metadata, validate_frame


def preview_md(df: pd.DataFrame, n: int = 10, max_chars: int = 80) -> dg.MetadataValue:
    """First ``n`` rows as a markdown table, long cells cut to ``max_chars``."""
    head = df.head(n).copy()
    for c in head.columns:
        if head[c].dtype == object:
            head[c] = head[c].map(lambda v: v if not isinstance(v, str) or len(v) <= max_chars
                                  else v[: max_chars - 1] + "…")
    return dg.MetadataValue.md(head.to_markdown(index=False) if len(head) else "_(no rows)_")


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


from pydantic import Field  # noqa: E402  (kept next to the model-upgrade helpers it serves)


class ComparisonConfig(dg.Config):
    """Settings of a study's ``model_comparison`` (upgrade verdicts)."""

    alpha: float = Field(default=0.05, gt=0, lt=1, description="Family-wise level of the verdicts (Holm over "
                         "every metric × slice of a candidate).")
    n_resamples: int = Field(default=2000, ge=100, description="Paired bootstrap resamples of the difference's CI.")
    seed: int = Field(default=0, description="Seed of the bootstrap (and of a Monte Carlo permutation test).")


def comparison_output(models, scores: pd.DataFrame, directions: dict, config: ComparisonConfig) -> dg.Output:
    """``model_comparison`` of a study: every registry candidate with item scores against the
    approved baseline (:func:`metamorph.comparison.compare_models`), validated, with the verdict
    counts and the regressions-first markdown table as metadata.

    ``models``: the registry entries. Without exactly one approved entry the table is empty and
    the metadata says why (a study run with an unranked registry is not an error).
    """
    from metamorph.comparison import COMPARISON_COLUMNS, compare_models, comparison_markdown, verdict_summary
    from metamorph.errors import ConfigError
    from metamorph.models import approved_baseline
    from metamorph.schemas import ModelComparison

    try:
        baseline = approved_baseline(models).id
    except ConfigError as exc:
        return validated_output(ModelComparison, pd.DataFrame(columns=COMPARISON_COLUMNS), "model_comparison",
                                {"baseline": dg.MetadataValue.text(f"none: {exc}")})
    evaluated = set(scores["model_id"])
    candidates = [m.id for m in models if m.status == "candidate" and m.id in evaluated]
    df = compare_models(scores, baseline, directions, candidates=candidates, alpha=config.alpha,
                        n_resamples=config.n_resamples, seed=config.seed)
    return validated_output(ModelComparison, df, "model_comparison", {
        "baseline": dg.MetadataValue.text(baseline if baseline in evaluated else f"{baseline} (not evaluated yet)"),
        "candidates_not_evaluated": dg.MetadataValue.json(
            [m.id for m in models if m.status == "candidate" and m.id not in evaluated]),
        "verdicts": dg.MetadataValue.md(verdict_summary(df).to_markdown(index=False) if len(df) else "_none_"),
        "comparison": dg.MetadataValue.md(comparison_markdown(df))})
