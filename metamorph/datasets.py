"""Reading raw dataset rows, shared by every study's loaders.

:func:`read_rows` reads a JSONL, JSON (list), CSV or Parquet file, from a local path or an
``hf://`` URI, into dicts; each study turns those rows into its own items
(``studies/<study>/sources.py``, ``tasks.py``, ``workflows.py`` ...). Every problem raises
:class:`~metamorph.errors.InputError` naming the file and the 1-based row.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from metamorph.errors import InputError


def read_rows(uri: str) -> list[dict[str, Any]]:
    """Read a JSONL, JSON (list), CSV or Parquet file (local path or ``hf://`` URI) into dicts.

    Raises :class:`InputError` for a path that does not exist, an empty file, a line that is not
    a JSON object, or an unknown extension. ``hf://`` URIs are read through ``huggingface_hub``'s
    fsspec file system (``pandas.read_*`` accepts them when ``huggingface_hub`` is installed).
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
    elif suffix in ("csv", "parquet", "json"):
        import pandas as pd

        try:
            if suffix == "csv":
                df = pd.read_csv(uri, dtype=str, keep_default_na=False)
            elif suffix == "parquet":
                df = pd.read_parquet(uri)
            else:
                df = pd.read_json(uri)
        except Exception as exc:
            raise InputError(uri, f"cannot read {suffix} file: {exc}") from exc
        rows = df.to_dict(orient="records")
    else:
        raise InputError(uri, f"unsupported file type {suffix!r}; use .jsonl, .json, .csv or .parquet")
    if not rows:
        raise InputError(uri, "file has no rows")
    return rows


def _read_jsonl(uri: str, is_remote: bool) -> list[dict[str, Any]]:
    if is_remote:
        import fsspec  # installed with huggingface_hub / pandas extras

        with fsspec.open(uri, "rt", encoding="utf-8-sig") as fh:
            lines = fh.read().splitlines()
    else:
        lines = Path(uri).read_text(encoding="utf-8-sig").splitlines()  # a BOM is not part of row 1
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
