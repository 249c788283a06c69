"""The data directory a run writes to (``METAMORPH_HOME``), checked before anything is written.

A run writes the warehouse, the generation cache, Dagster's run storage and a log file under
``METAMORPH_HOME``. On a directory that cannot be written, or a file system with almost no room
left, every one of those writes fails in turn: a read-only home ended in a traceback, and a full
one (a 3 MB tmpfs) printed 1,260 lines and 24 tracebacks around the one useful line.
:func:`check_home` tells it up front, in one line.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from metamorph.errors import ConfigError

__all__ = ["MIN_FREE_BYTES", "HomeError", "check_home"]

#: Free space a run needs on the home's file system before it starts (bytes): 64 MiB. Inputs alone
#: (``--no-models`` of the format study on its default source) write about 2.4 MB — warehouse,
#: Dagster's SQLite run storage and the log — and a model run adds its generations; this is a
#: floor that tells a full disk up front, not a promise that a large run fits.
MIN_FREE_BYTES = 64 * 2**20


class HomeError(ConfigError):
    """``METAMORPH_HOME`` (or ``DAGSTER_HOME``) cannot hold a run: one line naming the directory,
    what is wrong and what to do."""


def _existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (the directory the run would create it in)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_home(path: str | Path, variable: str = "METAMORPH_HOME", min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """Refuse a data directory a run cannot write to, before anything is written.

    ``path`` need not exist: then its nearest existing ancestor is checked (where the run would
    create it). The checks: it is a directory; a file can be created in it (a temporary file,
    removed at once — this catches a read-only mount and missing permissions alike); its file
    system has at least ``min_free_bytes`` free (:data:`MIN_FREE_BYTES`).

    Raises:
        HomeError: one line ``<variable> <path>: <problem>; <what to do>``.
    """
    home = Path(path)
    target = _existing(home)
    where = f"{variable} {home}"
    if not target.is_dir():
        raise HomeError(f"{where}: {target} is not a directory; set {variable} to a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".metamorph-write-check-", dir=target)
    except OSError as exc:
        reason = "the file system is read-only" if exc.errno == errno.EROFS else (exc.strerror or str(exc))
        if exc.errno == errno.ENOSPC:
            reason = "no space left on the device"
        raise HomeError(
            f"{where}: a run cannot write there ({reason}); set {variable} to a writable directory"
        ) from None
    os.close(fd)
    os.unlink(probe)
    free = shutil.disk_usage(target).free
    if free < min_free_bytes:
        raise HomeError(
            f"{where}: only {free / 2**20:.1f} MiB free on its file system; a run needs at least "
            f"{min_free_bytes / 2**20:.0f} MiB (warehouse, generation cache, Dagster's run storage, logs): "
            f"free some space or set {variable} to a directory on another disk"
        )
