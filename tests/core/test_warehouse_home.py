"""The warehouse is named relative to METAMORPH_HOME in the definitions and resolved when a run opens
it (resources/paths.py): the launchpad shows no absolute path, and one code location built once
writes to the warehouse of whichever METAMORPH_HOME a run starts under."""

from __future__ import annotations

import dagster as dg
import duckdb

from pipelines.definitions import defs
from tests.core.test_launch_config import scaffold


def strings(value) -> list[str]:
    """Every string in a nested run config (mapping keys not included)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def test_the_launchpad_of_an_asset_job_shows_the_warehouse_relative_to_metamorph_home():
    shown = scaffold(defs.resolve_job_def("format_robustness_inputs_job"))
    assert shown["resources"] == {
        "io_manager": {
            "config": {"connection_config": {}, "database": "metamorph.duckdb", "registry_models_only": True}
        }
    }
    assert [s for s in strings(shown) if s.startswith("/")] == []


def test_every_job_names_the_warehouse_relative_to_metamorph_home():
    for job in defs.resolve_all_job_defs():
        resources = scaffold(job).get("resources", {})
        for name in ("io_manager", "warehouse"):
            if name in resources:
                assert resources[name]["config"]["database"] == "metamorph.duckdb", (job.name, name)


def rows(home) -> list[tuple]:
    con = duckdb.connect(str(home / "metamorph.duckdb"), read_only=True)
    try:
        instances = con.execute("SELECT count(*) FROM format_robustness.source_instances").fetchall()
        ledger = con.execute(
            "SELECT run_id FROM metamorph_meta.table_writes WHERE table_name = 'format_robustness.source_instances'"
        ).fetchall()
    finally:
        con.close()
    return instances + ledger


def test_two_runs_under_two_homes_write_to_their_own_warehouses(tmp_path, monkeypatch):
    """One process, the module's ``defs`` (built at import): each run writes its own home's warehouse."""
    job = defs.resolve_job_def("format_robustness_inputs_job")
    config = {"ops": {"format_robustness__source_instances": {"config": {"sources": ["construct"], "limit": 2}}}}
    runs = {}
    for name, limit in (("a", 2), ("b", 3)):
        home = tmp_path / name
        home.mkdir()
        monkeypatch.setenv("METAMORPH_HOME", str(home))
        config["ops"]["format_robustness__source_instances"]["config"]["limit"] = limit
        with dg.instance_for_test() as instance:
            result = job.execute_in_process(
                instance=instance,
                run_config=config,
                asset_selection=[dg.AssetKey(["format_robustness", "source_instances"])],
            )
            assert result.success
            runs[name] = result.run_id
            (mat,) = result.asset_materializations_for_node("format_robustness__source_instances")
            assert mat.metadata["warehouse"] == dg.MetadataValue.path("metamorph.duckdb")
    assert rows(tmp_path / "a") == [(2,), (runs["a"],)]
    assert rows(tmp_path / "b") == [(3,), (runs["b"],)]


SECRET_URL = "postgresql://metamorph:s3cret-pw@127.0.0.1:5432/metamorph"


def test_a_cache_url_with_a_password_is_never_in_the_definitions(monkeypatch):
    """METAMORPH_CACHE_URL reaches the cache resource as an environment variable: every job's launchpad
    shows its name, and the password is in no job's scaffold nor in the repository snapshot the UI's
    resources page reads."""
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster._serdes import serialize_value

    from pipelines.definitions import build_definitions

    monkeypatch.setenv("METAMORPH_CACHE_URL", SECRET_URL)
    built = build_definitions()
    jobs = [j for j in built.resolve_all_job_defs() if "generation_cache" in scaffold(j).get("resources", {})]
    assert len(jobs) >= 4  # a model job per study at least
    for job in jobs:
        shown = scaffold(job)
        assert shown["resources"]["generation_cache"] == {"config": {"path": {"env": "METAMORPH_CACHE_URL"}}}, job.name
        assert not [s for s in strings(shown) if "s3cret" in s], job.name
    snapshot = serialize_value(RepositorySnap.from_def(built.get_repository_def()))
    assert "s3cret" not in snapshot and "METAMORPH_CACHE_URL" in snapshot


def test_without_a_cache_url_the_cache_is_named_relative_to_metamorph_home(tmp_path, monkeypatch):
    from pipelines.definitions import build_definitions

    monkeypatch.delenv("METAMORPH_CACHE_URL", raising=False)
    built = build_definitions()
    shown = scaffold(built.resolve_job_def("format_robustness_model_job"))
    assert shown["resources"]["generation_cache"] == {"config": {"path": "generation_cache.duckdb"}}
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path))
    with dg.build_resources({"generation_cache": built.resources["generation_cache"]}) as resources:
        cache = resources.generation_cache.open()
    try:
        assert cache.path == str(tmp_path / "generation_cache.duckdb")
        assert (tmp_path / "generation_cache.duckdb").is_file()
    finally:
        cache.close()
