"""Dagster's local compute logs whose mirroring processes leave Ctrl-C to the run.

Dagster's :class:`~dagster._core.storage.local_compute_log_manager.LocalComputeLogManager` captures
each step's stdout and stderr in files (what the UI shows) and mirrors them back to the terminal
through two helper processes per stream: ``tail -F`` and a Python watcher
(``dagster._core.execution.scripts.watch_orphans``) that ends the tail should the run die. They
share the run's process group, so Ctrl-C in a terminal (or ``timeout -s INT``), which signals the
whole group, reached the watchers too, and each printed a ``KeyboardInterrupt`` traceback around the
run's one-line message.

:class:`InterruptQuietComputeLogManager` is the same manager whose helpers are started with SIGINT
blocked (a blocked signal stays blocked across ``exec``): they never see Ctrl-C, and end as before —
terminated by Dagster when the step's capture ends, or by the watcher once the run's process is
gone. The run's process handles Ctrl-C as before (a signal arriving while it starts them is
delivered right after). ``base_dir`` defaults to ``$DAGSTER_HOME/storage``, Dagster's own default.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Generator, Sequence
from contextlib import ExitStack, contextmanager

from dagster import Field, Float, StringSource
from dagster._core.storage.compute_log_manager import CapturedLogContext
from dagster._core.storage.local_compute_log_manager import LocalComputeLogManager

__all__ = ["InterruptQuietComputeLogManager"]


class InterruptQuietComputeLogManager(LocalComputeLogManager):
    """:class:`LocalComputeLogManager` whose tail and watcher processes ignore SIGINT (module docstring).

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
