"""assets._common.metric_table: the one declaration of a metric table — its description and
"Code:" pointer derived from the function it calls, config fields and fixed keywords passed to
that function, and the row with a note when the function cannot estimate."""

import dagster as dg
import pandas as pd
import pandera.pandas as pa
from pandera.typing.pandas import Series

from assets._cells import Cells
from assets._common import metric_table


class Shares(pa.DataFrameModel):
    group: Series[str] = pa.Field(description="The group of rows.")
    share_pct: Series[float] = pa.Field(nullable=True, description="% of the group's rows above the threshold.")
    note: Series[str] = pa.Field(nullable=True, description="Why nothing was estimated.")


def share_above(rows: pd.DataFrame, threshold: float = 0.0, *, scale: float = 1.0) -> pd.DataFrame:
    """Share of each group's ``x`` above ``threshold`` times ``scale``; ValueError for a negative threshold."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold:g}")
    above = rows.assign(above=rows["x"] > threshold).groupby("group", as_index=False)["above"].mean()
    return pd.DataFrame({"group": above["group"], "share_pct": above["above"] * scale, "note": None})


class ThresholdConfig(dg.Config):
    threshold: float = 0.0


@dg.asset(key_prefix=["study"], group_name="study")
def rows() -> pd.DataFrame:
    return pd.DataFrame({"group": ["a", "a", "b", "b"], "x": [1.0, -1.0, 2.0, 0.25], "kept": [True, True, True, False]})


shares = metric_table(
    "study",
    "shares",
    share_above,
    Shares,
    ins=["rows"],
    config=ThresholdConfig,
    config_args=("threshold",),
    kwargs={"scale": 100.0},
    prepare={"rows": lambda frame, config: frame[frame["kept"]]},
    not_estimated=lambda args, inputs, config: {"group": "*"},
    cells=Cells("share_pct", ("group",), worse=None, bounds=(0.0, 100.0)),
    metadata=lambda df: {"groups": dg.MetadataValue.int(len(df))},
    row="One row per group: the share of its rows above the threshold.",
    source="§1",
)


def run(threshold: float):
    result = dg.materialize([rows, shares], run_config={"ops": {"study__shares": {"config": {"threshold": threshold}}}})
    table = result.output_for_node("study__shares")
    md = result.asset_materializations_for_node("study__shares")[0].metadata
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    return table, md, checks


def test_the_description_names_the_function_it_calls_and_the_checks_follow_the_cells():
    assert shares.op.description == (
        "One row per group: the share of its rows above the threshold. Source: §1. "
        "Code: tests.core.test_metric_table.share_above."
    )
    assert [s.name for s in shares.check_specs] == ["rows_present", "value_defined", "value_in_range"]
    assert shares.keys_by_input_name == {"rows": dg.AssetKey(["study", "rows"])}
    assert shares.group_names_by_key[dg.AssetKey(["study", "shares"])] == "study"


def test_config_fields_and_fixed_keywords_reach_the_function():
    # rows kept by the projection: a (1.0, -1.0), b (2.0); above 0.5: a 1 of 2, b 1 of 1
    table, md, checks = run(0.5)
    assert table.to_dict(orient="list") == {"group": ["a", "b"], "share_pct": [50.0, 100.0], "note": [None, None]}
    assert md["groups"].value == 2 and md["dagster/row_count"].value == 2
    assert checks == {"rows_present": True, "value_defined": True, "value_in_range": True}


def test_a_value_error_is_one_row_with_the_reason():
    table, _, checks = run(-1.0)
    assert list(table.columns) == ["group", "share_pct", "note"] and len(table) == 1
    assert table["group"].tolist() == ["*"] and table["share_pct"].isna().all()
    assert table["note"].tolist() == ["not estimated: threshold must be >= 0, got -1"]
    assert checks == {"rows_present": True, "value_defined": False, "value_in_range": True}


def test_the_sql_files_it_runs_are_named_after_the_function_and_must_exist():
    import pytest

    declared = metric_table(
        "format_robustness", "t", share_above, Shares, ins=["rows"], row="One row per group.", sql=["silent_violations"]
    )
    assert declared.op.description == (
        "One row per group. Code: tests.core.test_metric_table.share_above "
        "(sql/format_robustness/silent_violations.sql)."
    )
    assert declared.specs_by_key[dg.AssetKey(["format_robustness", "t"])].kinds == {"duckdb", "sql"}
    with pytest.raises(FileNotFoundError, match="no SQL file"):
        metric_table("format_robustness", "t", share_above, Shares, ins=["rows"], row="One row.", sql=["nope"])
