"""Where metamorph keeps its files. Absolute paths: run workers may start in another cwd.

* ``METAMORPH_HOME`` (default ``<repo>/data``): the warehouse ``metamorph.duckdb`` and the
  generation cache ``generation_cache.duckdb``;
* ``METAMORPH_CACHE_URL`` (optional): the generation cache's location instead of that file — a
  ``postgresql://user@host:port/dbname`` URL puts it on PostgreSQL (shared by workers on several
  processes or hosts: docs/scaling-out.md), any other value is a DuckDB file path;
* ``METAMORPH_MODELS`` (default ``<repo>/config/models.yaml``): the model registry.

The definitions' resources name the warehouse by :data:`WAREHOUSE` and the generation cache by
:data:`CACHE`, paths relative to ``METAMORPH_HOME`` that :func:`home_path` resolves when a resource
opens them: the launchpad shows no absolute path, and a run writes to the warehouse and cache of the
``METAMORPH_HOME`` it runs under. ``METAMORPH_CACHE_URL`` reaches the cache resource as
``dagster.EnvVar``, read in the run: a URL holding a password is never part of the definitions, the
launchpad or the resources page.

Metadata stores paths relative to ``METAMORPH_HOME`` (:func:`home_relative`); the command line
prints them resolved.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """``$METAMORPH_HOME``, absolute; ``<repo>/data`` when it is unset or empty (as ``DAGSTER_HOME``)."""
    return Path(os.environ.get("METAMORPH_HOME") or REPO_ROOT / "data").resolve()


def home_relative(path: str | Path) -> str:
    """``path`` relative to ``METAMORPH_HOME`` (:func:`data_dir`) when it lies inside it (POSIX
    form, e.g. ``metamorph.duckdb``), else absolute: what metadata stores, so that it stays right
    when the data directory moves."""
    p = Path(path).resolve()
    try:
        return p.relative_to(data_dir()).as_posix()
    except ValueError:
        return str(p)


#: The warehouse as the definitions' resources name it: a path relative to ``METAMORPH_HOME``.
WAREHOUSE = "metamorph.duckdb"

#: The generation cache as the definitions' resources name it when ``METAMORPH_CACHE_URL`` is not set.
CACHE = "generation_cache.duckdb"


def home_path(path: str | Path) -> str:
    """``path`` as a resource opens it: a relative path is taken relative to ``METAMORPH_HOME``
    (:func:`data_dir`, read now), an absolute one, a URL (``postgresql://…``) or DuckDB's
    ``:memory:`` is kept as given."""
    text = str(path)
    return text if text == ":memory:" or "://" in text else str(data_dir() / path)


def warehouse_path() -> str:
    """The warehouse file, absolute: ``<METAMORPH_HOME>/metamorph.duckdb``."""
    return home_path(WAREHOUSE)


def cache_path() -> str:
    """The generation cache's location: ``$METAMORPH_CACHE_URL`` when set (a PostgreSQL URL or a
    DuckDB path), else ``<METAMORPH_HOME>/generation_cache.duckdb``."""
    return os.environ.get("METAMORPH_CACHE_URL") or home_path(CACHE)


def registry_path() -> str:
    """``$METAMORPH_MODELS``, absolute; ``<repo>/config/models.yaml`` when it is unset or empty."""
    return str(Path(os.environ.get("METAMORPH_MODELS") or REPO_ROOT / "config" / "models.yaml").resolve())
