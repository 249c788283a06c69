"""Run the project's DuckDB SQL (``sql/<study>/<name>.sql``) over pandas frames.

Set-based metric tables are written as SQL; :func:`run_sql` registers the given frames as
tables of an in-memory DuckDB connection (no warehouse lock is taken) and returns the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pandas as pd

from metamorph.datasets import read_text

__all__ = [
    "SQL_DIR",
    "markdown_sections",
    "run_sql",
    "sql_path",
]

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"


def sql_path(study: str, name: str) -> Path:
    """Path of ``sql/<study>/<name>.sql``; raises ``FileNotFoundError`` when it does not exist."""
    p = SQL_DIR / study / f"{name}.sql"
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
