"""The safe DuckDB IO manager: transactional, by-name writes (materialized through Dagster)."""

import dagster as dg
import duckdb
import pandas as pd
import pandera.pandas as pa
from pandera.typing.pandas import Series

from assets._common import validated_output
from metamorph.schemas import StrictModel, table_schema_metadata

from pipelines.run import failure_message
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
        # the first error, one line naming the table, the partition and the column (not the error of
        # a statement run after it in the aborted transaction)
        assert failure_message(res) == (
            "s__p: writing s.p (partition m1): column \"x\" (BIGINT): value 'not a number' is not a BIGINT",
            False,
        )
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


# ------------------------------------------------------------------------------------------
# Column types come from the declared schema, not from the first write's values


def describe(db, table) -> dict[str, str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {r[0]: r[1] for r in con.execute(f"DESCRIBE {table}").fetchall()}
    finally:
        con.close()


def test_columns_all_null_in_the_first_model_keep_their_declared_types(stub, metamorph_home, tmp_path, monkeypatch):
    """Three ordinary sequences, the format study's real assets against the stub: model ``quiet``
    first — every call answered (``workflow_generations.error`` all null), every reply unparseable
    (``extracted_decisions.decision`` all null), an OpenAI-compatible server that reports no
    ``system_fingerprint`` —, then model ``loud``: one failed call, parseable replies, a fingerprint."""
    import json

    from pipelines.definitions import build_definitions
    from tests.conftest import shared_sample
    from tests.core.stub_http import Reply, chat_completion

    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n"
        + "".join(
            f"  - id: {m}\n    provider: openai_compatible\n    model: {m}-model\n"
            f"    base_url: {stub.url}/v1\n    api_key_env: STUB_KEY\n    max_concurrency: 1\n"
            for m in ("quiet", "loud")
        )
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    calls = {"loud": 0}

    def reply(rec):
        if rec.json["model"] == "quiet-model":
            return Reply(200, chat_completion("I would rather not say.", model="quiet-model"))
        calls["loud"] += 1
        if calls["loud"] == 2:  # the second call of model loud fails (not retryable)
            return Reply(400, {"error": {"message": "bad request", "type": "invalid_request_error"}})
        body = chat_completion(json.dumps({"decision": "A", "evidence": ["fever"]}), model="loud-model")
        return Reply(200, {**body, "system_fingerprint": "fp_loud"})

    stub.script("POST", "/v1/chat/completions", reply)
    defs = build_definitions()
    model_job = defs.resolve_job_def("format_robustness_model_job")
    selection = [dg.AssetKey(["format_robustness", n]) for n in ("workflow_generations", "extracted_decisions")]
    db = metamorph_home / "metamorph.duckdb"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["quiet", "loud"])
        inputs = defs.resolve_job_def("format_robustness_inputs_job").execute_in_process(
            instance=instance,
            run_config={
                "ops": {
                    "format_robustness__source_instances": {
                        "config": {"sources": [f"medqa:{shared_sample('medqa')}"], "limit": 1}
                    }
                }
            },
        )
        assert inputs.success
        config = {"ops": {"format_robustness__workflow_generations": {"config": {"k": 1}}}}
        first = model_job.execute_in_process(
            instance=instance, partition_key="quiet", asset_selection=selection, run_config=config
        )
        assert first.success
        gen, dec = (
            describe(db, "format_robustness.workflow_generations"),
            describe(db, "format_robustness.extracted_decisions"),
        )
        assert (gen["error"], gen["system_fingerprint"], dec["decision"]) == ("VARCHAR", "VARCHAR", "VARCHAR")
        second = model_job.execute_in_process(
            instance=instance, partition_key="loud", asset_selection=selection, run_config=config, raise_on_error=False
        )
        assert second.success
    rows = table(
        db,
        "SELECT g.model_id, g.error IS NOT NULL AS failed, g.system_fingerprint, d.decision "
        "FROM format_robustness.workflow_generations g JOIN format_robustness.extracted_decisions d "
        "USING (model_id, generation_key) ORDER BY g.model_id, failed",
    )
    assert rows.where(rows.notna(), None).values.tolist() == [
        ["loud", False, "fp_loud", "A"],
        ["loud", False, "fp_loud", "A"],
        ["loud", False, "fp_loud", "A"],
        ["loud", True, None, None],
        ["quiet", False, None, None],
        ["quiet", False, None, None],
        ["quiet", False, None, None],
        ["quiet", False, None, None],
    ]


class Declared(StrictModel):
    model_id: Series[str] = pa.Field()
    x: Series[int] = pa.Field()
    note: Series[str] = pa.Field(nullable=True)


def declared(frame_for):
    @dg.asset(key_prefix=["s"], name="d", partitions_def=parts, metadata={"partition_expr": "model_id"})
    def d(context: dg.AssetExecutionContext):
        return validated_output(Declared, frame_for(context.partition_key), "d")

    return d


def test_a_column_an_older_write_left_null_takes_its_declared_type(tmp_path):
    db = tmp_path / "w.duckdb"
    con = duckdb.connect(str(db))  # as the first write of an earlier version left it: note typed "NULL"
    con.execute("CREATE SCHEMA s; CREATE TABLE s.d AS SELECT 'm1' AS model_id, 1::BIGINT AS x, NULL AS note")
    con.close()
    assert describe(db, "s.d")["note"] == '"NULL"'
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["m1", "m2"])
        assert run(
            [declared(lambda k: pd.DataFrame({"model_id": [k], "x": [2], "note": ["seen"]}))], db, "m2", instance
        ).success
    assert describe(db, "s.d") == {"model_id": "VARCHAR", "x": "BIGINT", "note": "VARCHAR"}
    got = table(db, "SELECT * FROM s.d ORDER BY model_id")
    assert got.where(got.notna(), None).values.tolist() == [["m1", 1, None], ["m2", 2, "seen"]]


def test_an_empty_or_all_null_first_write_creates_the_declared_types(tmp_path):
    db = tmp_path / "w.duckdb"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["m1", "m2"])
        empty = pd.DataFrame({"model_id": pd.Series([], dtype=object), "x": pd.Series([], dtype="int64"), "note": []})
        assert run([declared(lambda k: empty)], db, "m1", instance).success
        assert describe(db, "s.d") == {"model_id": "VARCHAR", "x": "BIGINT", "note": "VARCHAR"}
        assert run(
            [declared(lambda k: pd.DataFrame({"model_id": [k], "x": [3], "note": ["n"]}))], db, "m2", instance
        ).success
    assert table(db, "SELECT * FROM s.d").values.tolist() == [["m2", 3, "n"]]


def test_an_undeclared_column_of_nulls_only_is_refused_in_one_line(tmp_path):
    db = tmp_path / "w.duckdb"
    res = run([make_unpartitioned(pd.DataFrame({"a": [1], "b": [None]}))], db, raise_on_error=False)
    assert failure_message(res) == (
        "s__t: s.t: column 'b' holds only nulls and its type is not declared "
        "(write the frame with its table schema: validated_output)",
        False,
    )
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 't'").fetchall() == [(0,)]
    finally:
        con.close()


def test_every_declared_column_type_of_every_study_has_a_duckdb_type():
    import importlib
    import pkgutil

    import metamorph.schemas
    import metamorph.studies
    from resources.storage import DECLARED_TYPES

    modules = [metamorph.schemas] + [
        importlib.import_module(f"metamorph.studies.{m.name}.schemas")
        for m in pkgutil.iter_modules(metamorph.studies.__path__)
    ]
    models = {
        obj
        for mod in modules
        for obj in vars(mod).values()
        if isinstance(obj, type) and issubclass(obj, pa.DataFrameModel) and obj.__module__ == mod.__name__
    }
    assert len(models) > 40
    used = {t for model in models for _, t, _ in table_schema_metadata(model)}
    assert used - set(DECLARED_TYPES) == set()


def test_a_sql_step_that_fails_leaves_the_warehouse_closed_for_the_next_connection(tmp_path):
    # A step whose SQL fails (a view naming a column the table lacks); then the failed run's
    # partial marks open the file with DuckDB's default configuration, as pipelines.partial does.
    # With the stock DuckDBResource that connection is refused ("different configuration").
    from resources.storage import WarehouseResource

    db = str(tmp_path / "w.duckdb")
    duckdb.connect(db).execute("CREATE TABLE t (a INTEGER)").close()

    @dg.asset
    def views(warehouse: WarehouseResource):
        with warehouse.get_connection() as con:
            con.execute("CREATE VIEW v AS SELECT filename FROM t")

    res = dg.materialize([views], resources={"warehouse": WarehouseResource(database=db)}, raise_on_error=False)
    assert not res.success
    con = duckdb.connect(db)
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)
    con.close()
