"""Command line: materialize a study on a persistent Dagster instance and print its headline table.

    python -m pipelines.run <study> [options]          # the same as: metamorph run <study> [options]
    python -m pipelines.run <study> --help             # the study's options ("common" and its own)
    python -m pipelines.run <study> --source <spec> --limit 50 --models <id> --budget-usd 1

The studies are those of :func:`metamorph.study.studies`; each is a sub-command whose options come
from its :class:`metamorph.study.Study` (the parser is :func:`metamorph.study.add_study_commands`,
shared with ``metamorph plan``). Runs show up in the UI (``make ui``) because the same
``DAGSTER_HOME`` (default ``data/dagster_home``) is used; each run is created under its job in the
UI's code location ``metamorph`` (:func:`pipelines.instance.ui_job_origin`), so the Overview's
timeline shows it. Every registry model is registered as a partition and run. Opening the instance
and launching the runs is :mod:`pipelines.instance`'s; this module is the study's run and its report.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from pathlib import Path

from pipelines.instance import (
    EXIT_INTERRUPTED,
    INTERRUPTED,
    add_partitions,
    ensure_dagster_home,
    launch_tags,
    open_instance,
    pool_holders,
    reclaim_stale_runs,
    run_job,
)


def connect_read_only(database: str, timeout_s: float = 300.0):
    """A read-only DuckDB connection to ``database``, waiting while another process writes it.

    DuckDB lets one process open a file read-write, and no other process open it at all meanwhile
    (read-only included). When two runs share the warehouse, the one that finishes first prints
    its headline while the other's next step may be writing: this retries every 0.1–0.5 s instead
    of failing. Raises ``duckdb.IOException`` when the file stayed locked for ``timeout_s`` seconds.
    """
    import duckdb

    deadline, pause = time.monotonic() + timeout_s, 0.1
    while True:
        try:
            return duckdb.connect(database, read_only=True)
        except duckdb.IOException:
            if time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 1.5, 0.5)


def suite_connection(database: str, study, suite: str):
    """An in-memory DuckDB connection where the schema ``<study>`` holds a view of every table of
    the schema ``<suite>`` of the warehouse ``database`` (attached read-only as ``warehouse``): the
    study's headline queries, written against ``<study>.<table>``, then read the suite's tables."""
    import duckdb

    con = duckdb.connect(":memory:")
    quoted = str(database).replace("'", "''")
    con.execute(f"ATTACH '{quoted}' AS warehouse (READ_ONLY)")
    con.execute(f'CREATE SCHEMA "{study.name}"')
    tables = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = 'warehouse' AND schema_name = ?", [suite]
    ).fetchall()
    for (table,) in tables:
        con.execute(f'CREATE VIEW "{study.name}"."{table}" AS SELECT * FROM warehouse."{suite}"."{table}"')
    return con


def print_headline(study, database: str, options, suite: str | None = None) -> None:
    """Print ``study``'s headline tables (:attr:`metamorph.study.Study.headline` with ``options``,
    a :class:`metamorph.study.Options`) of ``suite`` (default: the study's default suite; another
    suite's through :func:`suite_connection`), then the suite's tables marked partial in the
    warehouse ledger, if any (:mod:`pipelines.partial`)."""
    from pipelines.partial import warehouse_partial

    suite = suite or study.name
    con = connect_read_only(database)
    try:
        if suite == study.name:
            print(study.headline(con, options))
        else:
            view = suite_connection(database, study, suite)
            try:
                print(study.headline(view, options))
            finally:
                view.close()
        partial = warehouse_partial(con, suite)
        if partial:
            print(
                f"\nnote: {len(partial)} table(s) of {suite} were last written by a run that failed (partial; "
                "SELECT * FROM metamorph_meta.table_writes WHERE partial IS NOT NULL):"
            )
            for table, partition, _, note in partial:
                print(f"  {table}{f' [{partition}]' if partition else ''}: {note}")
    finally:
        con.close()


#: Exit code of a run that finished with calls that failed at the provider (after their retries):
#: the tables were written without them; rerunning the same command retries only those calls.
EXIT_CALL_ERRORS = 3


def table_columns(con, schema: str, table: str) -> set[str]:
    """The column names of ``schema.table`` on the DuckDB connection ``con`` (empty when the table
    was never written)."""
    rows = con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = ?", [schema, table]
    ).fetchall()
    return {r[0] for r in rows}


def failed_calls(database: str, study, models: list[str], suite: str | None = None) -> dict[str, tuple[int, int]]:
    """Per generation table of ``study`` (:attr:`metamorph.study.Study.budget_assets`): ``(failed,
    calls)`` of the rows of ``models`` in the warehouse. A table of one row per call counts a row
    whose ``error`` is set (the provider failed after its retries; never a reply) — a row that was
    not sent (its ingestion path cannot take the document: :data:`metamorph.measurability.NOT_SENT`)
    is neither a call nor a failed one; a table of one
    row per item sums its ``n_call_errors`` over its calls (``n_calls``, or ``attempts`` for a
    generator's retries). Tables not written, or with neither shape, are left out. ``suite``: the
    schema of the tables (default: the study's default suite, named like the study)."""
    from metamorph.measurability import NOT_SENT

    schema = suite or study.name
    con = connect_read_only(database)
    try:
        out = {}
        for table in study.budget_assets:
            cols = table_columns(con, schema, table)
            if "model_id" not in cols or not models:
                continue
            if "error" in cols:  # a request that was not sent (measurability.NOT_SENT) is no call
                sent = f"(error IS NULL OR NOT starts_with(error, '{NOT_SENT}'))"
                counts = f"count(error) FILTER (WHERE {sent}), count(*) FILTER (WHERE {sent})"
            elif "n_call_errors" in cols and {"n_calls", "attempts"} & cols:
                counts = f"sum(n_call_errors), sum({'n_calls' if 'n_calls' in cols else 'attempts'})"
            else:
                continue
            marks = ", ".join("?" for _ in models)
            failed, calls = con.execute(
                f'SELECT {counts} FROM "{schema}"."{table}" WHERE model_id IN ({marks})', models
            ).fetchone()
            if calls:
                out[table] = (int(failed), int(calls))
        return out
    finally:
        con.close()


def not_sent_line(database: str, study, models: list[str], suite: str | None = None) -> str | None:
    """The note a run prints when some requests were not sent because their ingestion path cannot
    take the document's format (rows whose ``error`` begins :data:`metamorph.measurability.NOT_SENT`,
    in the generation tables of ``study`` for ``models``), e.g. ``2 requests were not sent
    (workflow_generations 2): …``; None when every request was sent. ``suite``: the schema of the
    tables (default: the study's default suite)."""
    from metamorph.measurability import NOT_SENT

    schema = suite or study.name
    con = connect_read_only(database)
    try:
        counts = {}
        for table in study.budget_assets:
            cols = table_columns(con, schema, table)
            if not {"model_id", "error"} <= cols or not models:
                continue
            marks = ", ".join("?" for _ in models)
            (n,) = con.execute(
                f'SELECT count(*) FROM "{schema}"."{table}" WHERE model_id IN ({marks}) AND starts_with(error, ?)',
                [*models, NOT_SENT],
            ).fetchone()
            if n:
                counts[table] = int(n)
    finally:
        con.close()
    if not counts:
        return None
    total = sum(counts.values())
    parts = ", ".join(f"{t} {n}" for t, n in counts.items())
    return (
        f"{total} request{' was' if total == 1 else 's were'} not sent ({parts}): an ingestion path cannot take "
        "their document's format (metamorph plan names them); those cells are not measurable"
    )


def call_errors_line(counts: dict[str, tuple[int, int]]) -> str | None:
    """The line a run prints when calls failed, e.g. ``8 of 24 calls failed at the provider
    (workflow_generations 8 of 24) …``; None when none did."""
    failed = sum(f for f, _ in counts.values())
    if not failed:
        return None
    calls = sum(c for _, c in counts.values())
    parts = ", ".join(f"{t} {f} of {c}" for t, (f, c) in counts.items() if f)
    return (
        f"{failed} of {calls} calls failed at the provider ({parts}): they are not answers and every table "
        "leaves them out (n_call_errors); rerun the same command to retry only them "
        "(the replies are served from the generation cache)"
    )


def verdicts_note(models: list) -> str | None:
    """The line the run prints when the registry ``models`` has no single ``approved`` entry: no
    upgrade verdict was made (every ``model_comparison`` is empty) and why; ``None`` otherwise."""
    from metamorph.errors import ConfigError
    from metamorph.models import approved_baseline

    try:
        approved_baseline(models)
    except ConfigError as exc:
        return f"note: no upgrade verdicts were made (model_comparison is empty): {exc}"
    return None


def model_job_selection(job_def, study, options, suite: str | None = None) -> list | None:
    """The asset keys of ``<suite>_model_job`` (default suite: ``<study>_model_job``) to run: all
    (None), or without the assets the flags set in ``options`` leave out
    (:meth:`metamorph.study.Study.dropped_assets`, e.g. format routing's with ``--no-routing``)."""
    import dagster as dg

    dropped = study.dropped_assets(options)
    if not dropped:
        return None
    skip = {dg.AssetKey([suite or study.name, name]) for name in dropped}
    return sorted(job_def.asset_layer.executable_asset_keys - skip, key=lambda k: k.to_user_string())


#: Error classes of bad input or configuration: the run exits 2 with their one-line message.
INPUT_ERRORS = (
    "InputError",
    "ConfigError",
    "RegistryError",
    "ContextBudgetError",
    "ThresholdsError",
    "SchemaViolation",
    "BudgetError",
)


def _run_interrupted(result) -> bool:
    """Whether the run's failure event (no step failed) carries an interrupt (:data:`INTERRUPTS`)."""
    failures = [e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE"]
    err = getattr(failures[0].event_specific_data, "error", None) if failures else None
    while err is not None:
        if err.cls_name in INTERRUPTS:
            return True
        err = err.cause
    return False


def failure_message(result) -> tuple[str, bool]:
    """The first failed step's error as one line, and whether it is bad input.

    The error chain is walked from the outside in; the first error raised by our code (not a
    Dagster wrapper) is reported, so an :class:`~metamorph.errors.InputError` naming the file, row
    and field is shown rather than the JSONDecodeError it wraps.
    """
    events = result.get_step_failure_events()
    if not events:
        if _run_interrupted(result):  # Ctrl-C while a resource was set up, before a step ran
            return INTERRUPTED, False
        return "the run failed before any step ran", False
    err = events[0].event_specific_data.error
    if err.cls_name in INTERRUPTS:
        return INTERRUPTED, False
    while err.cause is not None and err.cls_name.startswith("Dagster"):
        err = err.cause
    message = err.message.strip().splitlines()[0] if err.message.strip() else err.cls_name
    # Dagster's message starts with the class name, module-qualified for non-builtin classes
    message = re.sub(rf"^(?:[\w.]+\.)?{re.escape(err.cls_name)}: ", "", message)
    return f"{events[0].step_key}: {message}", err.cls_name in INPUT_ERRORS


#: Error classes of a run stopped by Ctrl-C or SIGTERM: not a failure of the study.
INTERRUPTS = ("DagsterExecutionInterruptedError", "KeyboardInterrupt")


class _ForPeople(logging.Filter):
    """Keep the lines a person reads on the terminal: our own progress messages (INFO+, no Dagster
    event attached); Dagster's step events and stack traces go to the log file only."""

    def filter(self, record: logging.LogRecord) -> bool:
        meta = getattr(record, "dagster_meta", None) or {}
        return meta.get("dagster_event") is None and record.levelno >= logging.INFO


class _Short(logging.Formatter):
    """A Dagster log line without its ``<job> - <run id> - <step> - `` prefix."""

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).rsplit(" - ", 1)[-1]


def cli_logger(log_file: Path):
    """The Dagster logger of ``pipelines.run``: everything (events, stack traces) to ``log_file``,
    only our own progress lines to the terminal."""
    import dagster as dg

    @dg.logger(description="pipelines.run: full log to a file, progress lines to the terminal")
    def _cli_logger(init_context):
        logger = logging.Logger("metamorph", level=logging.DEBUG)
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(file_handler)
        terminal = logging.StreamHandler(sys.stderr)
        terminal.addFilter(_ForPeople())
        terminal.setFormatter(_Short("%(message)s"))
        logger.addHandler(terminal)
        return logger

    return _cli_logger


def build_parser() -> argparse.ArgumentParser:
    """The command line: ``metamorph run``'s, one sub-command per study
    (:func:`metamorph.study.add_study_commands`), under the name ``python -m pipelines.run``."""
    from metamorph.cli import OneLineParser, plain
    from metamorph.study import add_study_commands

    ap = OneLineParser(
        prog="python -m pipelines.run", description=plain(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_study_commands(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    """``python -m pipelines.run <study> [options]``: the same as ``metamorph run <study> [options]``."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run the study ``args.study`` with the parsed options (:func:`build_parser`, ``metamorph run``):
    bad input exits 2 before anything is written, then the inputs job, the model job per model, one
    run of the tables job (the cross-model tables, once for all the models), the report card
    (``model_upgrades_job``, reading this suite for the study) and the headline. Returns the exit code.

    The sources are read, parsed and sampled once (:func:`metamorph.study.sources_loaded_once`):
    the check below, the inputs job's launch check and its source asset, all in this process, use
    the same rows."""
    from metamorph.study import sources_loaded_once

    with sources_loaded_once():
        return _run(args)


def _run(args: argparse.Namespace) -> int:

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import dagster as dg

    from metamorph.costplan import check_max_tokens
    from metamorph.errors import ConfigError, MetamorphError
    from metamorph.cache import check_cache_file
    from metamorph.home import check_home
    from metamorph.models import check_study_kinds, load_registry
    from metamorph.study import chosen_models, get
    from pipelines.components import chosen_suite, suite_values
    from pipelines.inputs import InputsRejected
    from pipelines.jobs import split_ops, table_names
    from assets.partitions import model_partitions
    from resources.llm import build_provider
    from resources.paths import cache_path, data_dir, registry_path, warehouse_path

    study = get(args.study)
    try:  # bad input fails here, before DAGSTER_HOME, the warehouse or a log file is created
        chosen = chosen_suite(study, getattr(args, "suite", None))
        from pipelines.definitions import defs  # a suite of the defs folder that does not load: one line

        try:  # built now, not by the first job: a name two definitions take is refused before anything is written
            defs.get_repository_def()
        except dg.DagsterInvalidDefinitionError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(f"the code location's definitions do not load: {first}") from None

        cli = study.from_args(args)
        options = suite_values(study, chosen, {n: getattr(cli, n) for n in cli.given})
        suite = study.name if chosen is None else chosen.name
        study.sources_of(options)  # the rows the launch check and the source asset then read again
        specs = {m.id: m for m in load_registry(registry_path())}
        models = [m.id for m in chosen_models(list(specs.values()), options.models, options.origins.get("models"))]
        check_study_kinds(study.name, study.takes_documents, [specs[m] for m in models])
        if getattr(options, "sequential", False) and not options.no_models:
            from pipelines.sequential import SequentialError, check_prefixes, sequential_parties

            try:
                if suite != study.name:
                    raise SequentialError(f"--sequential runs the study's default suite ({study.name}), not {suite!r}")
                sequential_parties(list(specs.values()), models)
                check_prefixes(study, options)
            except SequentialError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
        if not options.no_models:  # fail before anything is written: keys present, model files found
            for m in models:
                provider = build_provider(specs[m])
                check_max_tokens(specs[m], options.max_tokens, getattr(provider, "n_ctx", 0))
        check_home(data_dir())  # writable, with room: else every write below fails in turn
        check_cache_file(cache_path())  # a truncated or corrupt cache file, before the inputs are written
        if os.environ.get("DAGSTER_HOME"):
            check_home(os.environ["DAGSTER_HOME"], "DAGSTER_HOME")
    except MetamorphError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ensure_dagster_home()
    instance = open_instance()
    for run_id in reclaim_stale_runs(instance):
        print(
            f"note: run {run_id} was left running by a killed process or had ended holding its pool slot; "
            "the slot is freed",
            file=sys.stderr,
        )
    for run_id in pool_holders(instance):
        print(
            f"note: run {run_id} holds the duckdb pool slot; this run waits until it ends (if no process runs "
            f"it, terminate it in the UI or run: dagster run delete {run_id})",
            file=sys.stderr,
        )
    # every registry entry is a partition (the UI's model jobs then offer them all, evaluated or not)
    add_partitions(instance, model_partitions.name, list(specs))

    log_dir = data_dir() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / f"{suite}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    logger_defs = {"console": cli_logger(log_file)}

    def run_one(job: str, ops: dict, partition: str | None = None, model_job: bool = False) -> tuple[int, str] | None:
        job_def = defs.resolve_job_def(job)
        try:
            res = run_job(
                job_def.with_logger_defs(logger_defs),
                instance,
                {"ops": ops, "loggers": {"console": {}}},
                partition=partition,
                tags=launch_tags(),
                asset_selection=model_job_selection(job_def, study, options, suite) if model_job else None,
            )
        except InputsRejected as exc:  # the job's config check (pipelines.inputs), at launch
            return 2, f"{job}: {exc}"
        except dg.DagsterUserCodeExecutionError as exc:  # any other error of a config mapping
            return 1, f"{job}: {exc.user_exception}"
        except (KeyboardInterrupt, dg.DagsterExecutionInterruptedError):
            return EXIT_INTERRUPTED, INTERRUPTED
        if res.success:
            return None
        message, bad_input = failure_message(res)
        if message == INTERRUPTED:
            return EXIT_INTERRUPTED, INTERRUPTED
        return (2 if bad_input else 1), message

    t0 = time.monotonic()

    def suite_ops(ops: dict) -> dict:  # the suite's ops are <suite>__<asset>
        return {f"{suite}__{k.split('__', 1)[1]}": v for k, v in ops.items()}

    sequential_rows = None
    if getattr(options, "sequential", False) and not options.no_models:
        from pipelines.sequential import SequentialError, run_sequential, write_runs

        try:
            failed, sequential_rows = run_sequential(
                study,
                options,
                specs,
                models,
                lambda job, ops, partition, mj: run_one(job, ops, partition=partition, model_job=mj),
                str(warehouse_path()),
            )
        except SequentialError as exc:
            print(f"error: {exc}  [full log: {log_file}]", file=sys.stderr)
            return 2
        if sequential_rows is not None:
            write_runs(str(warehouse_path()), study.name, sequential_rows)
    else:
        failed = run_one(f"{suite}_inputs_job", suite_ops(study.inputs_ops(options)))
        model_ops, tables_ops = split_ops(study, suite_ops(study.model_ops(options)))
        for m in [] if options.no_models or failed else models:
            failed = run_one(f"{suite}_model_job", model_ops, partition=m, model_job=True)
            if failed:
                failed = failed if failed[0] == EXIT_INTERRUPTED else (failed[0], f"(model {m}) {failed[1]}")
                break
        # the cross-model tables, once for every model (none left out by the options: no tables run)
        if not failed and not options.no_models and models and table_names(study, study.dropped_assets(options)):
            failed = run_one(f"{suite}_tables_job", tables_ops, model_job=True)
        if not failed and not options.no_models and study.sequential:
            from pipelines.sequential import clear_runs

            clear_runs(str(warehouse_path()), study.name)  # its items are no longer those compared
    if not failed and not options.no_models:  # the cross-study report card, over the studies run so far (~3 s)
        # the card reads the suite that ran for its study (the other studies: their default suites)
        card = {} if suite == study.name else {"config": {"suites": {study.name: suite}}}
        failed = run_one("model_upgrades_job", {"model_upgrades__robustness_report_card": card} if card else {})
    if failed:
        label = "" if failed[0] == EXIT_INTERRUPTED else "error: "
        print(f"{label}{failed[1]}  [full log: {log_file}]", file=sys.stderr)
        return failed[0]
    errors = None
    if options.no_models and not study.headline_without_models:
        print(f"\nInputs materialized ({suite}); no model was run, so there are no new metric tables.")
    else:
        errors = None if options.no_models else call_errors_line(failed_calls(warehouse_path(), study, models, suite))
        if errors:
            print(f"\nwarning: {errors}.")
        unsent = None if options.no_models else not_sent_line(warehouse_path(), study, models, suite)
        if unsent:
            print(f"\nnote: {unsent}.")
        print_headline(study, warehouse_path(), options, suite)
        if sequential_rows is not None:
            from pipelines.sequential import summary_lines

            print("\n" + "\n".join(summary_lines(sequential_rows)))
        note = verdicts_note(list(specs.values()))
        if note:
            print(f"\n{note}")
    print(
        f"\nDone in {time.monotonic() - t0:.0f}s. Warehouse: {warehouse_path()}  "
        f"UI: make ui  (DAGSTER_HOME={os.environ['DAGSTER_HOME']})  Log: {log_file}"
    )
    if errors:
        print(f"Finished with failed calls (exit {EXIT_CALL_ERRORS}): {errors.split(':')[0]}.")
        return EXIT_CALL_ERRORS
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
