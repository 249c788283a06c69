"""Dagster instance plumbing of ``metamorph run``: the instance it opens, the runs it launches.

* :func:`ensure_dagster_home` / :func:`open_instance`: the ``DAGSTER_HOME`` (its ``dagster.yaml``,
  :data:`DAGSTER_YAML`) and the instance, opened under a lock; :func:`dagster_home` and
  :func:`has_instance` find them without creating anything;
* :func:`add_partitions`: the registry's models as dynamic partitions;
* :func:`launch_tags`, :func:`reclaim_stale_runs`, :func:`pool_holders`: the runs this command
  launched, those a killed process left running, the holders of the ``duckdb`` pool slot;
* :func:`run_job`: one job executed in-process, placed under its job in the UI's code location
  (:func:`ui_job_origin`), Ctrl-C honoured while it waits for the pool (:class:`InterruptWhileBlocked`);
* :class:`InterruptQuietComputeLogManager`: the step logs of dagster.yaml, whose helper processes leave
  Ctrl-C to the run.

This is the one module of the project that imports from Dagster's private modules
(``dagster._…``); each such import says which public API is missing. Everything else uses
``import dagster as dg``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Generator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import dagster as dg
from dagster import Field, Float, StringSource

# Launching: a launch refused before a run exists is sent to the UI's launch dialog as the error info
# a ``DagsterUserCodeProcessError`` carries (:class:`pipelines.inputs.LaunchRejected`). Dagster has
# no public error class whose info the code server forwards without a stack.
from dagster._core.errors import DagsterUserCodeProcessError

# Step logs (:class:`InterruptQuietComputeLogManager`): Dagster has no public compute log manager to
# subclass, nor its capture context; dagster.yaml names the manager by module and class.
from dagster._core.storage.compute_log_manager import CapturedLogContext

# (as above) no public LocalComputeLogManager: the helper processes it starts are what is changed here
from dagster._core.storage.local_compute_log_manager import LocalComputeLogManager

__all__ = ["DagsterUserCodeProcessError", "InterruptQuietComputeLogManager"]


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
# Step stdout/stderr: Dagster's local compute logs (under storage/), mirrored to the terminal by helper
# processes that leave Ctrl-C to the run (pipelines.instance): no traceback of theirs on an interrupt.
compute_logs:
  module: pipelines.instance
  class: InterruptQuietComputeLogManager
# No usage telemetry, and no first-visit pop-up in the UI (Dagster's "nux": the community nag).
telemetry:
  enabled: false
nux:
  enabled: false
# The code location imports torch and the studies: on a loaded machine with few cores its gRPC server
# takes longer than Dagster's default 180 s to start.
code_servers:
  local_startup_timeout: 600
"""


def dagster_home() -> Path:
    """The instance's directory, absolute: ``$DAGSTER_HOME`` or ``<METAMORPH_HOME>/dagster_home``
    (nothing is created)."""
    from resources.paths import data_dir

    return Path(os.environ.get("DAGSTER_HOME") or data_dir() / "dagster_home").resolve()


def has_instance(home: Path) -> bool:
    """Whether the directory ``home`` holds a Dagster instance: its ``dagster.yaml`` (written by
    :func:`ensure_dagster_home`) or its run storage ``history/`` (an instance without one)."""
    return (home / "dagster.yaml").is_file() or (home / "history").is_dir()


def ensure_dagster_home() -> Path:
    """Use :func:`dagster_home` (created when missing); write :data:`DAGSTER_YAML` as its
    dagster.yaml when the file is missing or is an older one written here (its first line is
    :data:`DAGSTER_YAML_HEADER`); a dagster.yaml written by someone else is left as it is."""
    home = dagster_home()
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

    with open(Path(os.environ["DAGSTER_HOME"]) / INSTANCE_LOCK, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            return dg.DagsterInstance.get()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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


#: The one line printed when a run is stopped by Ctrl-C or SIGTERM.
INTERRUPTED = "interrupted — the completions made so far are in the generation cache; rerun the same command to resume"
#: Exit code of an interrupted run (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


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
    from pipelines.partial import mark_partial_run

    stale = []
    for r in instance.get_runs(
        filters=dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING], tags={LAUNCHER_TAG: "pipelines.run"}
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
        pending = self.instance.event_log_storage.get_concurrency_info("duckdb").pending_run_ids
        mine = self.instance.get_runs(
            filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED], tags={PID_TAG: str(os.getpid())})
        )
        return [r.run_id for r in mine if r.run_id in pending]

    def _watch(self) -> None:
        # Dagster has no public way to ask whether the in-process executor captured a SIGINT/SIGTERM
        # that no step has taken yet.
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


#: The workspace file the UI loads (``make ui``; ``[tool.dg]`` names the same code location).
WORKSPACE_YAML = Path(__file__).resolve().parents[1] / "workspace.yaml"


def ui_job_origin(job_name: str):
    """The ``RemoteJobOrigin`` of job ``job_name`` in the code location the UI serves
    (:data:`WORKSPACE_YAML`, repository ``__repository__``).

    A run created by ``execute_in_process`` has no origin, and the UI leaves such runs off its
    Overview timeline (it groups runs by their repository origin); with this origin the runs of
    this command are placed under their job in that code location, like a run launched from the UI.
    """
    # Dagster has no public API that builds the origin of a job in a workspace file's code location.
    from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
    from dagster._core.remote_origin import RemoteRepositoryOrigin
    from dagster._core.workspace.load import location_origins_from_yaml_paths

    [location] = location_origins_from_yaml_paths([str(WORKSPACE_YAML)])
    return RemoteRepositoryOrigin(location, SINGLETON_REPOSITORY_NAME).get_job_origin(job_name)


@contextlib.contextmanager
def runs_created_with_origin(instance, origin):
    """While open, runs that ``instance`` creates for a job definition (what ``execute_in_process``
    calls) carry ``origin`` (:func:`ui_job_origin`); the instance is as before on exit.

    ``execute_in_process`` takes no origin for the run it creates (Dagster has no public API for an
    in-process run with a remote origin); it creates the run with ``instance.create_run_for_job``,
    which is wrapped here while the block runs."""
    create = instance.create_run_for_job
    instance.create_run_for_job = functools.partial(create, remote_job_origin=origin)
    try:
        yield
    finally:
        del instance.create_run_for_job


def run_job(
    job_def,
    instance,
    run_config: dict,
    partition: str | None = None,
    tags: dict | None = None,
    asset_selection: list | None = None,
):
    """Execute ``job_def`` in-process on ``instance`` (errors returned, not raised), the run placed
    under its job in the UI's code location (:func:`ui_job_origin`); when the run fails, the tables
    it wrote before failing are marked partial (:func:`pipelines.partial.mark_partial_run`) and the
    note naming them goes to stderr.

    Returns the ``ExecuteInProcessResult``. Raises what ``execute_in_process`` raises before a run
    exists (a rejected config).
    """
    from pipelines.partial import mark_partial_run

    with InterruptWhileBlocked(instance), runs_created_with_origin(instance, ui_job_origin(job_def.name)):
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


# ------------------------------------------------------------------------------------------
# Step logs: Dagster's local compute logs whose mirroring processes leave Ctrl-C to the run.
#
# Dagster's :class:`~dagster._core.storage.local_compute_log_manager.LocalComputeLogManager` captures
# each step's stdout and stderr in files (what the UI shows) and mirrors them back to the terminal
# through two helper processes per stream: ``tail -F`` and a Python watcher
# (``dagster._core.execution.scripts.watch_orphans``) that ends the tail should the run die. They
# share the run's process group, so Ctrl-C in a terminal (or ``timeout -s INT``), which signals the
# whole group, reached the watchers too, and each printed a ``KeyboardInterrupt`` traceback around the
# run's one-line message.
#
# :class:`InterruptQuietComputeLogManager` is the same manager whose helpers are started with SIGINT
# blocked (a blocked signal stays blocked across ``exec``): they never see Ctrl-C, and end as before —
# terminated by Dagster when the step's capture ends, or by the watcher once the run's process is
# gone. The run's process handles Ctrl-C as before (a signal arriving while it starts them is
# delivered right after). ``base_dir`` defaults to ``$DAGSTER_HOME/storage``, Dagster's own default.


class InterruptQuietComputeLogManager(LocalComputeLogManager):
    """:class:`LocalComputeLogManager` whose tail and watcher processes ignore SIGINT (the comment above it).

    Config (``compute_logs.config`` in dagster.yaml): ``base_dir`` (optional, default
    ``$DAGSTER_HOME/storage``), ``polling_timeout`` (optional, as Dagster's)."""

    @classmethod
    def config_type(cls):
        return {"base_dir": Field(StringSource, is_required=False), "polling_timeout": Field(Float, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "InterruptQuietComputeLogManager":
        config = dict(config_value or {})
        base_dir = config.pop("base_dir", None) or os.path.join(os.environ["DAGSTER_HOME"], "storage")
        return cls(base_dir=base_dir, inst_data=inst_data, **config)

    @contextmanager
    def capture_logs(self, log_key: Sequence[str]) -> Generator[CapturedLogContext, None, None]:
        with ExitStack() as stack:
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:  # the helper processes start here and inherit the blocked SIGINT
                context = stack.enter_context(super().capture_logs(log_key))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)
            yield context
