"""The safe DuckDB IO manager: transactional, by-name writes (materialized through Dagster)."""

import dagster as dg
import duckdb
import pandas as pd

from resources.storage import SafeDuckDBPandasIOManager

parts = dg.DynamicPartitionsDefinition(name="model")


def run(assets, db, partition_key=None, instance=None, raise_on_error=True):
    return dg.materialize(
        assets,
        resources={"io_manager": SafeDuckDBPandasIOManager(database=str(db))},
        partition_key=partition_key,
        instance=instance,
        raise_on_error=raise_on_error,
    )


def table(db, sql):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).df()
    finally:
        con.close()


def make_unpartitioned(frame):
    @dg.asset(key_prefix=["s"], name="t")
    def t() -> pd.DataFrame:
        return frame

    return t


def test_reordered_column_is_written_by_name(tmp_path):
    db = tmp_path / "w.duckdb"
    run([make_unpartitioned(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}))], db)
    run([make_unpartitioned(pd.DataFrame({"b": ["p", "q"], "a": [3, 4]}))], db)
    assert table(db, "SELECT a, b FROM s.t ORDER BY a").to_dict("list") == {"a": [3, 4], "b": ["p", "q"]}


def test_added_column_unpartitioned(tmp_path):
    db = tmp_path / "w.duckdb"
    run([make_unpartitioned(pd.DataFrame({"a": [1]}))], db)
    run([make_unpartitioned(pd.DataFrame({"a": [2], "c": [0.5]}))], db)
    assert table(db, "SELECT * FROM s.t").to_dict("list") == {"a": [2], "c": [0.5]}


def test_empty_first_output_still_creates_the_table(tmp_path):
    db = tmp_path / "w.duckdb"
    run([make_unpartitioned(pd.DataFrame({"a": pd.Series([], dtype="int64")}))], db)
    assert table(db, "SELECT count(*) AS n FROM s.t")["n"].tolist() == [0]


def test_categoricals_are_strings(tmp_path):
    db = tmp_path / "w.duckdb"
    run([make_unpartitioned(pd.DataFrame({"c": pd.Categorical(["low"])}))], db)
    run([make_unpartitioned(pd.DataFrame({"c": pd.Categorical(["high"])}))], db)
    assert table(db, "SELECT c FROM s.t")["c"].tolist() == ["high"]


def partitioned(frame_for):
    @dg.asset(key_prefix=["s"], name="p", partitions_def=parts, metadata={"partition_expr": "model_id"})
    def p(context: dg.AssetExecutionContext) -> pd.DataFrame:
        return frame_for(context.partition_key)

    return p


def test_partitioned_added_and_reordered_columns_keep_other_partitions(tmp_path):
    db = tmp_path / "w.duckdb"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["m1", "m2"])
        run([partitioned(lambda k: pd.DataFrame({"model_id": [k, k], "x": [1, 2]}))], db, "m1", instance)
        run([partitioned(lambda k: pd.DataFrame({"model_id": [k], "x": [5]}))], db, "m2", instance)
        # m1 again, columns reordered and one added
        run([partitioned(lambda k: pd.DataFrame({"y": ["new"], "x": [9], "model_id": [k]}))], db, "m1", instance)
    got = table(db, "SELECT model_id, x, y FROM s.p ORDER BY model_id, x")
    assert got.where(got.notna(), None).to_dict("list") == {"model_id": ["m1", "m2"], "x": [9, 5], "y": ["new", None]}


def test_failed_write_rolls_back_and_keeps_old_rows(tmp_path):
    db = tmp_path / "w.duckdb"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["m1"])
        run([partitioned(lambda k: pd.DataFrame({"model_id": [k, k], "x": [1, 2]}))], db, "m1", instance)
        # strings into the BIGINT column x: the insert fails after the delete ran -> rollback
        res = run(
            [partitioned(lambda k: pd.DataFrame({"model_id": [k], "x": ["not a number"]}))],
            db,
            "m1",
            instance,
            raise_on_error=False,
        )
        assert not res.success
    assert table(db, "SELECT x FROM s.p ORDER BY x")["x"].tolist() == [1, 2]


def test_unpartitioned_consumer_loads_all_partitions(tmp_path):
    db = tmp_path / "w.duckdb"
    p = partitioned(lambda k: pd.DataFrame({"model_id": [k], "x": [len(k)]}))

    @dg.asset(key_prefix=["s"], ins={"p": dg.AssetIn(key=["s", "p"])})
    def total(p: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"n": [len(p)], "sum": [int(p["x"].sum())]})

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["a", "bbb"])
        for k in ("a", "bbb"):
            run([p], db, k, instance)
        res = dg.materialize(
            [p, total],
            selection=dg.AssetSelection.assets(total),
            resources={"io_manager": SafeDuckDBPandasIOManager(database=str(db))},
            instance=instance,
        )
        assert res.success
    assert table(db, "SELECT * FROM s.total").to_dict("list") == {"n": [2], "sum": [4]}
