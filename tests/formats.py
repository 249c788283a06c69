"""The same rows written as JSONL, JSON, CSV and Parquet, for the tests that check a study's
loaders read each of its sources alike in every format (``metamorph.datasets.read_rows``)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

FORMATS = ("jsonl", "json", "csv", "parquet")


def _cell(v: Any) -> str:
    """A CSV cell: a list or an object as JSON text (docs/running.md), null as an empty cell."""
    if v is None:
        return ""
    if isinstance(v, (list, dict)):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def write_formats(rows: list[dict[str, Any]], folder: Path, stem: str) -> dict[str, Path]:
    """``rows`` as ``<folder>/<stem>.<format>`` for each of :data:`FORMATS`; returns the paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    paths = {fmt: folder / f"{stem}.{fmt}" for fmt in FORMATS}
    paths["jsonl"].write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    paths["json"].write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    columns = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO(newline="")
    writer = csv.writer(buf)
    writer.writerow(columns)
    writer.writerows([_cell(r.get(c)) for c in columns] for r in rows)
    paths["csv"].write_text(buf.getvalue(), encoding="utf-8", newline="")
    pq.write_table(pa.Table.from_pylist(rows), paths["parquet"])
    return paths


def head_rows(path: Path, n: int) -> list[dict[str, Any]]:
    """The first ``n`` records of a JSONL file."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for _, line in zip(range(n), fh)]


def same_items(items_by_format: dict[str, list], paths: dict[str, Path]) -> dict[str, str]:
    """Each format's items as text with its own file path replaced by ``<file>`` (items may name
    the file they came from), for an equality check across formats."""
    return {fmt: repr(items).replace(str(paths[fmt]), "<file>") for fmt, items in items_by_format.items()}
