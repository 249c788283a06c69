"""A sweep over several registry models builds each cross-model table once.

``metamorph run`` over three registry models (the model boundary is the local HTTP stub) runs one
model job per model, which materializes only that model's partitions, then ONE run of the tables
job for the cross-model tables; the report card is built once. The materializations are counted in
the Dagster instance the run used. A failed model run does not plan the cross-model tables, so the
catalog never marks them failed; and the tables' automation condition requests them once after the
model partitions were updated, not while a model run is in progress."""

from __future__ import annotations

import json
from collections import Counter

import dagster as dg
import pytest

from tests.core.stub_http import Reply, chat_completion

STUDY = "wrapper_sensitivity"
MODELS = ["m1", "m2", "m3"]
#: Two ARC items x five wrappers x one seed = 10 calls per model.
ARC = [
    {
        "id": f"q{i}",
        "question": f"Which number is largest ({i})?",
        "choices": [{"label": k, "text": t} for k, t in zip("ABCD", ("1", "9", "3", "4"))],
        "answerKey": "B",
    }
    for i in (1, 2)
]
#: wrapper_sensitivity's assets outside its inputs (qa_items, wrapped_prompts): partitioned by model ...
PER_MODEL = {"wrapper_generations", "scored_answers", "token_balance"}
#: ... and the cross-model tables, each read from every model partition.
CROSS_MODEL = {
    "acc_parse_correlation",
    "constrained_falsifier",
    "fixed_effects",
    "fsi_decomposition",
    "fsi_psi",
    "item_level_model",
    "lineage_views",
    "matched_fsi",
    "mean_fsi_psi",
    "model_comparison",
    "wrapper_cells",
    "wrapper_wins",
}


@pytest.fixture
def sweep(stub, tmp_path, monkeypatch, metamorph_home):
    """Three openai_compatible entries on the stub, every reply "The answer is B"; the ARC file's spec."""
    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n"
        + "".join(
            f"  - id: {m}\n    provider: openai_compatible\n    model: stub-{m}\n"
            f"    base_url: {stub.url}/v1\n    api_key_env: STUB_KEY\n    max_concurrency: 1\n"
            for m in MODELS
        )
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    stub.script("POST", "/v1/chat/completions", lambda rec: Reply(200, chat_completion("The answer is B")))
    path = tmp_path / "arc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ARC))
    return f"arc_challenge:{path}"


def materializations(instance: dg.DagsterInstance, key: dg.AssetKey) -> Counter:
    """Materialization events of ``key`` by partition (None: unpartitioned)."""
    records = instance.fetch_materializations(key, limit=1000).records
    return Counter(r.partition_key for r in records)


def test_a_sweep_over_three_models_builds_each_cross_model_table_once(sweep, stub, capsys):
    from pipelines.jobs import split_assets
    from pipelines.run import main

    assert split_assets(STUDY) == (frozenset(PER_MODEL), frozenset(CROSS_MODEL))
    assert main([STUDY, "--source", sweep, "--seeds", "0", "--models", *MODELS]) == 0
    assert "FSI" in capsys.readouterr().out  # the headline tables are printed as before
    assert len(stub.requests_to("/v1/chat/completions")) == 30
    with dg.DagsterInstance.get() as instance:
        for name in sorted(PER_MODEL):
            assert materializations(instance, dg.AssetKey([STUDY, name])) == {m: 1 for m in MODELS}, name
        for name in sorted(CROSS_MODEL):
            assert materializations(instance, dg.AssetKey([STUDY, name])) == {None: 1}, name
        assert materializations(instance, dg.AssetKey(["model_upgrades", "robustness_report_card"])) == {None: 1}
        jobs = Counter(r.dagster_run.job_name for r in instance.get_run_records())
        assert jobs == {
            f"{STUDY}_inputs_job": 1,
            f"{STUDY}_model_job": 3,
            f"{STUDY}_tables_job": 1,
            "model_upgrades_job": 1,
        }
