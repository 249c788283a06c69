"""A model removed from the registry leaves the cross-model tables built after its removal.

Two registry models run wrapper_sensitivity against the local HTTP stub; the candidate is then
removed from the registry file and the study's tables and the report card are built again. Every
cross-model table holds the registry's models only, and its metadata names the model left out, why
and when it last ran; the numbers of the model still registered are unchanged."""

from __future__ import annotations

import json

import dagster as dg
import duckdb
import pytest

from tests.core.stub_http import Reply, chat_completion
from tests.core.test_cross_model_once import ARC

STUDY = "wrapper_sensitivity"


def entry(m: str, url: str, status: str) -> str:
    return (
        f"  - id: {m}\n    provider: openai_compatible\n    model: stub-{m}\n    base_url: {url}/v1\n"
        f"    api_key_env: STUB_KEY\n    max_concurrency: 1\n    status: {status}\n"
    )


def rows(db, table: str, order: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
    finally:
        con.close()


def latest_md(instance, *key: str) -> dict:
    event = instance.get_latest_materialization_event(dg.AssetKey(list(key)))
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def test_a_model_removed_from_the_registry_is_left_out_of_later_tables_and_named(
    stub, tmp_path, monkeypatch, metamorph_home, capsys
):
    import pipelines.definitions
    from pipelines.run import main

    reg = tmp_path / "models.yaml"
    reg.write_text("models:\n" + entry("base", stub.url, "approved") + entry("gone", stub.url, "candidate"))
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    stub.script("POST", "/v1/chat/completions", lambda rec: Reply(200, chat_completion("The answer is B")))
    arc = tmp_path / "arc.jsonl"
    arc.write_text("".join(json.dumps(r) + "\n" for r in ARC))
    monkeypatch.setattr(pipelines.definitions, "defs", pipelines.definitions.build_definitions())
    source = f"arc_challenge:{arc}"
    db = metamorph_home / "metamorph.duckdb"

    assert main([STUDY, "--source", source, "--seeds", "0", "--models", "base", "gone"]) == 0
    cells = f"{STUDY}.wrapper_cells"
    before = rows(db, cells, "model_id, task, wrapper, mode")
    assert {r[0] for r in before} == {"base", "gone"}
    assert {r[1] for r in rows(db, f"{STUDY}.model_comparison", "candidate_id")} == {"base"}
    with dg.DagsterInstance.get() as instance:
        [gone_record] = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey([STUDY, "scored_answers"]), asset_partitions=["gone"]),
            limit=1,
        ).records
        gone_run = gone_record.run_id
    capsys.readouterr()

    # "gone" leaves the registry; the tables and the card are built again
    reg.write_text("models:\n" + entry("base", stub.url, "approved"))
    monkeypatch.setattr(pipelines.definitions, "defs", pipelines.definitions.build_definitions())
    assert main([STUDY, "--source", source, "--seeds", "0", "--models", "base"]) == 0
    after = rows(db, cells, "model_id, task, wrapper, mode")
    assert after == [r for r in before if r[0] == "base"]  # base's numbers unchanged
    card = rows(db, "model_upgrades.robustness_report_card", "model_id")
    card_cols = [
        c[0]
        for c in duckdb.connect(str(db), read_only=True)
        .execute("DESCRIBE model_upgrades.robustness_report_card")
        .fetchall()
    ]
    current = {r[card_cols.index("model_id")] for r in card if r[card_cols.index("is_current")]}
    assert current == {"base"}
    with dg.DagsterInstance.get() as instance:
        for name in ("wrapper_cells", "fsi_psi", "model_comparison"):
            md = latest_md(instance, STUDY, name)
            assert md["left_out_models"]["gone"]["why"] == f"not in the registry {reg}", name
            assert md["left_out_models"]["gone"]["last_run"] == gone_run, name
            assert md["left_out"].startswith("gone: not in the registry models.yaml; last run "), name
        md = latest_md(instance, "model_upgrades", "robustness_report_card")
        assert md["left_out_models"]["gone"]["why"] == f"not in the registry {reg}"
        md = latest_md(instance, STUDY, "lineage_views")
        assert md["left_out_models"]["gone"]["why"] == f"not in the registry {reg}"
        assert md["left_out_models"]["gone"]["last_run"] == gone_run
    # the lineage views follow the metric tables: gone's rows stay in its per-model tables, not in the views
    assert {r[0] for r in rows(db, f"{STUDY}.scored_answers", "model_id")} == {"base", "gone"}
    for view in ("answer_lineage", "cell_lineage", "spread_lineage"):
        assert {r[0] for r in rows(db, f"(SELECT DISTINCT model_id FROM {STUDY}.{view})", "1")} == {"base"}, view
    assert len(rows(db, f"{STUDY}.answer_lineage", "1")) == len(
        [r for r in rows(db, f"{STUDY}.scored_answers", "1") if r[0] == "base"]
    )
    [(m, current, why)] = rows(db, f"{STUDY}.lineage_models", "model_id")[1:]
    assert (m, current) == ("gone", False) and why.startswith("not in the registry models.yaml; last run ")
    from metamorph.trace import TraceError, trace

    with pytest.raises(TraceError) as e:
        trace(db, STUDY, "accuracy", "gone")
    assert str(e.value) == (
        f"model 'gone' is left out of the lineage views of {STUDY}, as of its metric tables: {why} (known: base)"
    )


def test_a_partition_removed_with_metamorph_partitions_is_named_where_it_is_left_out(
    stub, tmp_path, monkeypatch, metamorph_home, capsys
):
    """A model that left the registry and whose partition was then deleted (``metamorph partitions
    --remove``) has its rows in the per-model tables still; the stock load already skips a deleted
    partition, so the cross-model tables, the report card and the lineage views built afterwards
    leave it out and name it with why ``partition removed``."""
    import pipelines.definitions
    from metamorph.cli import main as cli
    from pipelines.run import main

    reg = tmp_path / "models.yaml"
    reg.write_text("models:\n" + entry("base", stub.url, "approved") + entry("typo", stub.url, "candidate"))
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    stub.script("POST", "/v1/chat/completions", lambda rec: Reply(200, chat_completion("The answer is B")))
    arc = tmp_path / "arc.jsonl"
    arc.write_text("".join(json.dumps(r) + "\n" for r in ARC))
    monkeypatch.setattr(pipelines.definitions, "defs", pipelines.definitions.build_definitions())
    source = f"arc_challenge:{arc}"
    db = metamorph_home / "metamorph.duckdb"
    assert main([STUDY, "--source", source, "--seeds", "0", "--models", "base", "typo"]) == 0
    before = rows(db, f"{STUDY}.wrapper_cells", "model_id, task, wrapper, mode")

    reg.write_text("models:\n" + entry("base", stub.url, "approved"))
    assert cli(["partitions", "--remove", "typo"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(pipelines.definitions, "defs", pipelines.definitions.build_definitions())
    assert main([STUDY, "--source", source, "--seeds", "0", "--models", "base"]) == 0
    assert rows(db, f"{STUDY}.wrapper_cells", "model_id, task, wrapper, mode") == [r for r in before if r[0] == "base"]
    assert {r[0] for r in rows(db, f"{STUDY}.scored_answers", "model_id")} == {"base", "typo"}  # no row deleted
    why = "partition removed (metamorph partitions --remove; not in the registry models.yaml)"
    with dg.DagsterInstance.get() as instance:
        assert "typo" not in instance.get_dynamic_partitions("model")
        for key in [
            (STUDY, "wrapper_cells"),
            (STUDY, "fsi_psi"),
            (STUDY, "model_comparison"),
            (STUDY, "lineage_views"),
        ]:
            md = latest_md(instance, *key)
            assert md["left_out_models"]["typo"]["why"] == why, key
            assert md["left_out"].startswith(f"typo: {why}; last run "), key
        md = latest_md(instance, "model_upgrades", "robustness_report_card")
        assert md["left_out_models"]["typo"]["why"] == why
    assert {r[0] for r in rows(db, f"(SELECT DISTINCT model_id FROM {STUDY}.answer_lineage)", "1")} == {"base"}
    assert [r[:2] for r in rows(db, f"{STUDY}.lineage_models", "model_id")] == [("base", True), ("typo", False)]
