"""Shared fixtures. Real samples are read by path from ../shared (never copied into the repo)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.core.stub_http import StubServer

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
SHARED_DATASETS = Path(os.environ.get("METAMORPH_SHARED", REPO.parent / "shared")) / "datasets"


def shared_sample(name: str) -> Path:
    """Path of ``../shared/datasets/<name>/sample.jsonl``; skips the test when it is absent."""
    p = SHARED_DATASETS / name / "sample.jsonl"
    if not p.exists():
        pytest.skip(f"shared sample {p} not present")
    return p


@pytest.fixture
def metamorph_home(tmp_path, monkeypatch):
    """A fresh METAMORPH_HOME (warehouse + cache) for one test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("METAMORPH_HOME", str(home))
    return home


@pytest.fixture
def clean_proxy_env(monkeypatch):
    """No proxy or provider env vars may redirect the SDKs away from the local stub."""
    for var in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_CUSTOM_HEADERS",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def stub(clean_proxy_env):
    """A running :class:`tests.stub_http.StubServer` on 127.0.0.1 (closed after the test)."""
    server = StubServer()
    yield server
    server.close()


def use_stub_registry(stub: StubServer, tmp_path: Path, monkeypatch) -> Path:
    """A registry of one model ``stub`` (openai_compatible on ``stub``, one request at a time) as
    ``METAMORPH_MODELS``, its key ``STUB_KEY`` set: the registry path."""
    reg = tmp_path / "models.yaml"
    reg.write_text(
        f"models:\n  - id: stub\n    provider: openai_compatible\n    model: stub-model\n"
        f"    base_url: {stub.url}/v1\n    api_key_env: STUB_KEY\n    max_concurrency: 1\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    return reg


# ------------------------------------------------------------------------------------------
# PostgreSQL and Redis (scripts/services.sh). Tests that need them are marked `services` (added
# automatically to every test using the fixtures below). When a service does not answer: with
# METAMORPH_SERVICES=1 (set by `make test` and .ci/run once the services are started) the test FAILS;
# without it (a plain pytest run with no services) the test is skipped, naming the command that starts them.

PG_URL = os.environ.get("METAMORPH_TEST_PG_URL", "postgresql://postgres@127.0.0.1:55432/postgres")
REDIS_URL = os.environ.get("METAMORPH_TEST_REDIS_URL", "redis://127.0.0.1:56379/0")
SERVICE_FIXTURES = {"postgres_url", "pg_schema_url", "redis_url", "cache_store_pg"}


def _unreachable(what: str, url: str, exc: Exception):
    msg = f"{what} not reachable at {url} ({type(exc).__name__}: {str(exc).strip()[:200]}); start it: scripts/services.sh start"
    if os.environ.get("METAMORPH_SERVICES") == "1":
        pytest.fail(f"METAMORPH_SERVICES=1 but {msg}", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test PostgreSQL server's URL (a superuser; METAMORPH_TEST_PG_URL)."""
    import psycopg2

    try:
        psycopg2.connect(PG_URL, connect_timeout=3).close()
    except psycopg2.OperationalError as exc:
        _unreachable("PostgreSQL", PG_URL, exc)
    return PG_URL


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis server's URL (METAMORPH_TEST_REDIS_URL)."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        _unreachable("Redis", REDIS_URL, exc)
    return REDIS_URL


@pytest.fixture
def pg_schema_url(postgres_url):
    """A URL whose connections work in a fresh schema of their own (dropped after the test)."""
    import psycopg2

    schema = f"t_{uuid.uuid4().hex[:12]}"
    con = psycopg2.connect(postgres_url)
    con.autocommit = True
    con.cursor().execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in postgres_url else "?"
    yield f"{postgres_url}{sep}options={quote(f'-csearch_path={schema}')}"
    con.cursor().execute(f"DROP SCHEMA {schema} CASCADE")
    con.close()


@pytest.fixture
def cache_store_pg(pg_schema_url):
    from tests.core.cache_backends import PostgresStore

    return PostgresStore(pg_schema_url)


@pytest.fixture(params=["duckdb", "postgres"])
def cache_store(request, tmp_path):
    """The generation cache's two backends (tests/core/cache_backends.py): a DuckDB file, and a
    fresh schema on the PostgreSQL test server."""
    from tests.core.cache_backends import DuckDBStore

    if request.param == "duckdb":
        return DuckDBStore(tmp_path / "c.duckdb")
    return request.getfixturevalue("cache_store_pg")


# ------------------------------------------------------------------------------------------
# A browser for the UI walk-through (tests marked `ui` that use the fixture below): a Chromium
# (Debian's `chromium`; scripts/services.sh start installs it) driven by Playwright's Python package
# (the test extra), never Playwright's own browser download. When either is missing: with
# METAMORPH_BROWSER=1 (set by .ci/run and by `make test` once scripts/services.sh has installed it)
# the test FAILS; without it the test is skipped, naming the command that installs it.

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of the Chromium executable ($METAMORPH_CHROMIUM, else the first of
    :data:`CHROMIUM_NAMES` on PATH) that Playwright launches."""
    import importlib.util
    import shutil

    found = os.environ.get("METAMORPH_CHROMIUM") or next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)
    missing = []
    if not found or not Path(found).exists():
        missing.append(f"no Chromium ({', '.join(CHROMIUM_NAMES)} on PATH, or METAMORPH_CHROMIUM)")
    if importlib.util.find_spec("playwright") is None:
        missing.append("no playwright Python package (the test extra: bash scripts/bootstrap.sh --dev)")
    if missing:
        msg = "; ".join(missing) + "; install Chromium: scripts/services.sh start browser"
        if os.environ.get("METAMORPH_BROWSER") == "1":
            pytest.fail(f"METAMORPH_BROWSER=1 but {msg}", pytrace=False)
        pytest.skip(msg)
    return found


# ------------------------------------------------------------------------------------------
# The fast inner loop (make test-fast) leaves out the tests marked `slow`: those that start
# `metamorph run` / the UI as processes, run two processes against each other, or materialize a
# whole study group — seconds to minutes each (measured with --durations; each took >= 4.5 s,
# together 85 % of the suite's time without the local models). They are
# named here, in one place, by test function (every parametrization); a name that matches no
# collected test fails the collection of the whole suite, so a renamed test cannot drop out of the
# list unnoticed.

SLOW = (
    "tests/core/test_bad_inputs.py::test_cli_exits_2_with_one_line_and_writes_nothing",
    "tests/core/test_batches.py::test_dagster_model_job_in_batch_mode",
    "tests/core/test_concurrent_runs.py::test_an_interrupt_stops_a_run_waiting_for_the_pool_at_once",
    "tests/core/test_concurrent_runs.py::test_two_runs_at_once_share_warehouse_cache_and_pool",
    "tests/core/test_cross_model_once.py::test_a_format_sweep_with_routing_builds_each_cross_model_table_once",
    "tests/core/test_costplan.py::test_format_routing_is_planned_as_an_upper_bound_the_run_meets",
    "tests/core/test_costplan.py::test_order_probe_plan_equals_the_run_and_a_budget_stops_it_before_any_request",
    "tests/core/test_costplan.py::test_workflow_perturb_plan_equals_the_run_and_a_budget_stops_the_generator",
    "tests/core/test_model_upgrades.py::test_format_verdicts_and_report_card_across_a_new_candidate_version",
    "tests/core/test_removed_model.py::test_a_model_removed_from_the_registry_is_left_out_of_later_tables_and_named",
    "tests/core/test_removed_model.py::test_a_partition_removed_with_metamorph_partitions_is_named_where_it_is_left_out",
    "tests/format_robustness/test_field_bound.py::test_a_field_at_the_bound_runs_and_one_over_is_refused_before_anything_is_written",
    "tests/core/test_partial_runs.py::test_failed_run_marks_what_it_wrote_and_leaves_the_rest",
    "tests/core/test_partial_runs.py::test_killed_run_is_marked_partial_by_the_next_pipelines_run",
    "tests/core/test_quiet_output.py::test_workflow_scoring_names_the_encoder_once_and_draws_no_bars",
    "tests/core/test_quiet_output.py::test_wrapper_inputs_run_prints_no_warning",
    "tests/core/test_registry_sensor.py::test_new_and_changed_registry_entries",
    "tests/core/test_registry_sensor.py::test_a_provider_side_change_makes_only_that_entrys_partitions_stale",
    "tests/core/test_run_cli.py::test_a_bad_option_is_one_line_exit_2_and_creates_nothing",
    "tests/core/test_run_cli.py::test_bad_jsonl_line_gives_one_line_and_exit_2",
    "tests/core/test_run_cli.py::test_ctrl_c_prints_one_line_and_a_rerun_resumes",
    "tests/core/test_run_cli.py::test_malformed_csv_source_gives_one_line_and_exit_2",
    "tests/core/test_run_cli.py::test_no_routing_runs_no_routing_calls_and_shows_voting_only",
    "tests/core/test_runner_faults.py::test_sigkill_mid_run_then_resume_requests_no_committed_key_twice_and_loses_none",
    "tests/core/test_runner_faults.py::test_two_runners_sharing_one_cache_split_the_keys_and_request_each_once",
    "tests/core/test_secrets.py::test_a_run_with_fake_keys_writes_them_nowhere",
    "tests/core/test_sensor_after_run.py::test_sensor_requests_nothing_after_pipelines_run_and_only_a_new_model_after_that",
    "tests/core/test_storage.py::test_columns_all_null_in_the_first_model_keep_their_declared_types",
    "tests/core/test_storage.py::test_failed_write_rolls_back_and_keeps_old_rows",
    "tests/core/test_storage.py::test_partitioned_added_and_reordered_columns_keep_other_partitions",
    "tests/core/test_storage.py::test_unpartitioned_consumer_loads_all_partitions",
    "tests/core/test_suite_commands.py::test_trace_verdict_and_the_card_read_the_suite_they_are_given",
    "tests/core/test_suites.py::test_a_second_suite_of_a_study_runs_beside_the_default_one",
    "tests/core/test_suites.py::test_every_command_of_the_suites_page_runs_verbatim",
    "tests/core/test_trace.py::test_format_trace_prints_the_raw_completions_of_an_m1_cell",
    "tests/core/test_trace.py::test_order_trace_reaches_the_raw_reply_of_a_recovery_cell",
    "tests/core/test_trace.py::test_workflow_views_and_trace_reach_the_variant_and_the_judge_reply",
    "tests/core/test_trace.py::test_wrapper_views_and_trace_reach_the_raw_completion",
    "tests/core/test_ui_browser.py::test_runs_page_and_overview_timeline_show_the_runs_of_the_run",
    "tests/core/test_ui_browser.py::test_an_asset_page_shows_its_preview_and_its_plot_in_place",
    "tests/core/test_ui_browser.py::test_the_report_card_is_materialized_by_the_run",
    "tests/core/test_ui_browser.py::test_the_asset_launchpad_refuses_limit_0_in_one_line_and_creates_no_run",
    "tests/core/test_ui_browser.py::test_the_headline_and_worst_cell_summary_tables_fit_the_metadata_pane",
    "tests/core/test_ui_browser.py::test_every_metadata_entry_and_figure_fits_the_pane",
    "tests/core/test_ui_process.py::test_ui_serves_and_a_signal_to_its_pid_stops_everything_it_started",
    "tests/format_robustness/test_call_errors.py::test_a_run_with_failed_calls_scores_only_the_replies_says_so_and_exits_3",
    "tests/format_robustness/test_call_errors.py::test_a_run_whose_every_call_failed_prints_not_measurable_never_a_rate",
    "tests/format_robustness/test_e2e_stub.py::test_group_with_routing_on_a_stub_model",
    "tests/order_probe/test_model_comparison_order.py::test_model_comparison_asset_materializes_on_a_scored_table",
    "tests/order_probe/test_order_probe_e2e.py::test_embedded_default_materializes_the_group",
    "tests/workflow_perturb/test_model_comparison_judge.py::test_comparison_and_card_materialize_on_a_judge_table",
    "tests/workflow_perturb/test_workflow_study.py::test_chain_f1_sensitivity_under_missing_steps_matches_the_paper_on_the_shared_sample",
)


def _function_id(item) -> str:
    """``tests/<path>.py::<function>`` of a collected test (without its parametrization)."""
    return item.nodeid.split("[", 1)[0]


def pytest_collection_modifyitems(config, items):
    slow = set(SLOW)
    seen = set()
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if names & SERVICE_FIXTURES or (callspec and callspec.params.get("cache_store") == "postgres"):
            item.add_marker(pytest.mark.services)
        if _function_id(item) in slow:
            item.add_marker(pytest.mark.slow)
            seen.add(_function_id(item))
    whole_suite = not config.args or [str(a).rstrip("/") for a in config.args] in (["tests"], [str(REPO / "tests")])
    if whole_suite and not config.option.keyword and slow - seen:
        raise pytest.UsageError(f"tests/conftest.py SLOW names tests that do not exist: {sorted(slow - seen)}")


@pytest.fixture(autouse=True)
def _no_stale_defs_state_storage():
    """dagster 1.13.27 leaves a closed test instance's DefsStateStorage in a context variable; a
    later ``materialize`` without an instance then fails with "undefined DagsterInstance weakref"."""
    from dagster._core.storage.defs_state import base

    base._current_storage.set(None)
    yield
    base._current_storage.set(None)
