"""Run a study's DuckDB SQL (``<name>.sql`` in its :attr:`~metamorph.study.Study.sql_dir`) over pandas frames, and open a
warehouse file read-only.

Set-based metric tables are written as SQL; :func:`run_sql` registers the given frames as
tables of an in-memory DuckDB connection (no warehouse lock is taken) and returns the result.
:func:`open_read_only` is how the CLI's readers (trace, verdict) open a warehouse the user names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pandas as pd

from metamorph.datasets import read_text

__all__ = [
    "markdown_sections",
    "open_read_only",
    "run_sql",
    "sql_path",
]

#: bytes 8-11 of every DuckDB database file.
_DUCKDB_MAGIC = b"DUCK"


def open_read_only(path: str | Path, error: type[Exception]) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the DuckDB file ``path``.

    Raises:
        error: (the caller's one-line error class) ``path`` does not exist, is a directory, is not
            a DuckDB database file (checked by its header, before DuckDB reads it), or DuckDB
            cannot open it (locked, another version); the line names the path and the reason.
    """
    p = Path(path)
    if p.is_dir():
        raise error(f"{p} is a directory, not a warehouse file")
    if not p.is_file():
        raise error(f"no warehouse file {p}")
    with open(p, "rb") as f:
        head = f.read(12)
    if head[8:12] != _DUCKDB_MAGIC:
        raise error(f"{p} is not a DuckDB database file (a warehouse is the .duckdb file a run writes)")
    try:
        return duckdb.connect(str(p), read_only=True)
    except duckdb.Error as exc:
        raise error(f"cannot open {p} read-only: {str(exc).splitlines()[0]}") from None


def sql_path(study: str, name: str) -> Path:
    """Path of ``<name>.sql`` in the SQL folder of ``study`` (:attr:`metamorph.study.Study.sql_dir`,
    ``sql/<study>/``); raises ``FileNotFoundError`` when it does not exist, :class:`ConfigError` for
    an unknown study."""
    from metamorph.study import get

    p = get(study).sql_dir / f"{name}.sql"
    if not p.exists():
        raise FileNotFoundError(f"no SQL file {p}")
    return p


def run_sql(study: str, name: str, **frames: pd.DataFrame) -> pd.DataFrame:
    """Execute ``sql/<study>/<name>.sql`` with each keyword frame visible as a table of that name."""
    con = duckdb.connect(":memory:")
    try:
        for table, frame in frames.items():
            con.register(table, frame)
        return con.execute(read_text(sql_path(study, name), "SQL file")).df()
    finally:
        con.close()


def markdown_sections(con: duckdb.DuckDBPyConnection, sections: Sequence[tuple[str, str]]) -> str:
    """``title`` then the result of ``query`` as a markdown table, for each ``(title, query)``,
    read through ``con`` (a study's headline printout). Query errors propagate (e.g.
    ``duckdb.CatalogException`` for a table not materialized yet)."""
    out = []
    for title, query in sections:
        out += ["", title, con.execute(query).df().to_markdown(index=False)]
    return "\n".join(out)
