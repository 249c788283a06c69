"""A warehouse written before a per-model table existed: the tables job names the missing table and
the command that builds it, in one line."""

from __future__ import annotations

import dagster as dg
import duckdb

from tests.core.test_cross_model_once import format_registry


def test_the_tables_job_names_a_missing_per_model_table_and_the_command_that_builds_it(
    stub, metamorph_home, tmp_path, monkeypatch
):
    """format_robustness's inputs and model job for one model, then its routing_choice_per_model
    table dropped (as in a warehouse written before that asset existed): the tables job's step
    routing_choice fails with one line naming the table and ``metamorph run format_robustness``;
    that command's runs build the table again and the tables job then succeeds."""
    from pipelines.definitions import build_definitions
    from pipelines.run import failure_message

    study = "format_robustness"
    format_registry(stub, tmp_path, monkeypatch, ["stub"])
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub"])
        inputs = {
            f"{study}__source_instances": {"config": {"sources": ["construct"], "limit": 2}},
            f"{study}__rendered_documents": {"config": {"formats": ["txt", "md"]}},
        }
        inputs_job = defs.resolve_job_def(f"{study}_inputs_job")
        assert inputs_job.execute_in_process(instance=instance, run_config={"ops": inputs}).success
        gen = {f"{study}__workflow_generations": {"config": {"k": 1}}}
        model_job = defs.resolve_job_def(f"{study}_model_job")
        assert model_job.execute_in_process(instance=instance, partition_key="stub", run_config={"ops": gen}).success
        con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"))
        con.execute(f"DROP TABLE {study}.routing_choice_per_model")
        con.close()
        tables_job = defs.resolve_job_def(f"{study}_tables_job")
        res = tables_job.execute_in_process(instance=instance, raise_on_error=False)
        assert failure_message(res) == (
            f"{study}__routing_choice: table {study}.routing_choice_per_model does not exist yet (the warehouse was "
            "written before this asset existed, or no run built it): build it with `metamorph run format_robustness` "
            f"(its jobs rebuild {study}/routing_choice_per_model; the replies already made come from the generation "
            "cache), or materialize it in the UI",
            False,
        )
        calls = len(stub.requests_to("/v1/chat/completions"))
        # what the command runs for the model: its model job (the replies from the cache), then the tables
        assert model_job.execute_in_process(instance=instance, partition_key="stub", run_config={"ops": gen}).success
        assert tables_job.execute_in_process(instance=instance).success
        assert len(stub.requests_to("/v1/chat/completions")) == calls
