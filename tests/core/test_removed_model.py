"""A model removed from the registry leaves the cross-model tables built after its removal.

Two registry models run wrapper_sensitivity against the local HTTP stub; the candidate is then
removed from the registry file and the study's tables and the report card are built again. Every
cross-model table holds the registry's models only, and its metadata names the model left out, why
and when it last ran; the numbers of the model still registered are unchanged."""

from __future__ import annotations

import json

import dagster as dg
import duckdb

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
