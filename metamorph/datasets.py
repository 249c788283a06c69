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

        with fsspec.open(uri, "rt", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    else:
        lines = Path(uri).read_text(encoding="utf-8").splitlines()
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
