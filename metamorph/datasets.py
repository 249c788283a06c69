"""Reading raw dataset rows, shared by every study's loaders.

:func:`read_rows` reads a JSONL, JSON (list), CSV or Parquet file, from a local path or an
``hf://`` URI, into dicts; each study turns those rows into its own items
(``studies/<study>/sources.py``, ``tasks.py``, ``workflows.py`` ...). Every problem raises
:class:`~metamorph.errors.InputError` naming the file and the 1-based row.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from metamorph.errors import InputError


def read_rows(uri: str) -> list[dict[str, Any]]:
    """Read a JSONL, JSON (list), CSV or Parquet file (local path or ``hf://`` URI) into dicts.

    Every dict carries ``__row__``, its 1-based row: the line of a JSONL file (blank lines are
    skipped but counted), the record of a CSV file after its header (blank lines are skipped and
    not counted; a quoted value may span lines), the element of a JSON list or the row of a
    Parquet table. CSV values are strings exactly as written (an empty cell is ``""``); a cell
    that holds a list or an object holds it as JSON text, which the study's adapter decodes.

    Raises :class:`InputError` for a path that does not exist, an empty file, a file that is not
    UTF-8 text (JSONL, CSV), a line that is not a JSON object, a CSV header with an empty or
    repeated column name, a CSV record with more or fewer values than the header (a *ragged*
    row, named by its row, and for a short row by its first column without a value), bad CSV
    quoting (named by its row), or an unknown extension.
    ``hf://`` URIs are read through ``huggingface_hub``'s fsspec file system.
    """
    is_remote = uri.startswith("hf://")
    if not is_remote:
        p = Path(uri)
        if not p.exists():
            raise InputError(uri, "file does not exist")
        if p.is_dir():
            raise InputError(uri, "is a directory, expected a file")
        if p.stat().st_size == 0:
            raise InputError(uri, "file is empty")
    suffix = uri.rsplit(".", 1)[-1].lower() if "." in uri.rsplit("/", 1)[-1] else ""
    if suffix == "jsonl":
        rows = _read_jsonl(uri, is_remote)
    elif suffix == "csv":
        rows = _read_csv(uri, is_remote)
    elif suffix in ("parquet", "json"):
        import pandas as pd

        try:
            df = pd.read_parquet(uri) if suffix == "parquet" else pd.read_json(uri)
        except Exception as exc:
            raise InputError(uri, f"cannot read {suffix} file: {exc}") from exc
        rows = df.to_dict(orient="records")
        for i, r in enumerate(rows, start=1):
            r["__row__"] = i
    else:
        raise InputError(uri, f"unsupported file type {suffix!r}; use .jsonl, .json, .csv or .parquet")
    if not rows:
        raise InputError(uri, "file has no rows")
    return rows


def _read_text(uri: str, is_remote: bool) -> str:
    """The file's text (UTF-8; a BOM is not part of row 1)."""
    try:
        if is_remote:
            import fsspec  # installed with huggingface_hub / pandas extras

            with fsspec.open(uri, "rb") as fh:
                data = fh.read()
        else:
            data = Path(uri).read_bytes()
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(uri, f"not UTF-8 text (byte offset {exc.start}: {exc.reason})") from exc


def _read_csv(uri: str, is_remote: bool) -> list[dict[str, Any]]:
    reader = csv.reader(io.StringIO(_read_text(uri, is_remote), newline=""), strict=True)
    rows: list[dict[str, Any]] = []
    header: list[str] | None = None
    try:
        for values in reader:
            if not values:  # a blank line
                continue
            if header is None:
                header = values
                for k, name in enumerate(header, start=1):
                    if not name.strip():
                        raise InputError(uri, f"column {k} of the header has no name")
                    if header.index(name) != k - 1:
                        raise InputError(uri, f"column {k} of the header repeats the name {name!r}", field=name)
                continue
            row = len(rows) + 1
            if len(values) != len(header):  # a short row names its first column without a value
                raise InputError(uri, f"ragged row: {len(values)} values, the header has {len(header)} "
                                 f"columns (line {reader.line_num})", row=row,
                                 field=header[len(values)] if len(values) < len(header) else None)
            rows.append({**dict(zip(header, values)), "__row__": row})
    except csv.Error as exc:
        raise InputError(uri, f"bad CSV quoting ({exc}, line {reader.line_num})",
                         row=None if header is None else len(rows) + 1) from exc
    return rows


def _read_jsonl(uri: str, is_remote: bool) -> list[dict[str, Any]]:
    lines = _read_text(uri, is_remote).split("\n")  # not splitlines(): U+2028 etc. may sit inside a JSON string
    rows = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(uri, f"not valid JSON ({exc.msg})", row=i) from exc
        if not isinstance(obj, dict):
            raise InputError(uri, "a JSONL row must be an object", row=i)
        obj["__row__"] = i
        rows.append(obj)
    return rows


def read_json_file(path: str | Path, what: str = "file", error: type[InputError] = InputError) -> Any:
    """Parse the JSON file at ``path`` (a path or an ``importlib.resources`` traversable).

    Raises ``error`` (an :class:`InputError` subclass) naming the file when it does not exist,
    cannot be read or decoded as UTF-8, or is not valid JSON (with line and column).
    """
    try:
        text = path.read_text(encoding="utf-8") if hasattr(path, "read_text") else Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(str(path), f"{what} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(str(path), f"cannot read the {what}: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(str(path), f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc


def required(row: dict[str, Any], key: str, source: str, row_no: int) -> Any:
    """``row[key]``; :class:`InputError` naming ``source``, the row and the field when it is
    missing, null or a blank string."""
    v = row.get(key)
    if v is None or (isinstance(v, str) and not v.strip()):
        raise InputError(source, "missing or empty", row=row_no, field=key)
    return v
