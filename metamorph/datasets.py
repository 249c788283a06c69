"""Reading raw dataset rows, shared by every study's loaders.

:func:`read_rows` reads a JSONL, JSON (list), CSV or Parquet file, from a local path or an
``hf://`` URI, into dicts; each study turns those rows into its own items
(``studies/<study>/sources.py``, ``tasks.py``, ``workflows.py`` ...). Every problem raises
:class:`~metamorph.errors.InputError` naming the file, the 1-based row and, when one field is at
fault, the field. :func:`required` and :func:`required_text` are the row-field helpers the
loaders share.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from metamorph.errors import InputError

__all__ = [
    "CSV_FIELD_LIMIT",
    "MAX_FIELD_CHARS",
    "TOO_DEEP",
    "csv_reader",
    "JSONTooDeep",
    "decode_utf8",
    "read_json_file",
    "read_rows",
    "read_text",
    "check_id_text",
    "required",
    "required_id",
    "required_text",
    "value_problem",
    "loads",
    "refuse_duplicate_keys",
    "spec_params",
]

#: Longest string a field may hold (characters). No model context takes more (the largest hold about
#: 10^6 tokens), so a longer field is a broken file — e.g. a missing closing quote — not data.
MAX_FIELD_CHARS = 1_000_000

#: What Python's ``csv`` module may read in one field: every CSV parse of the project (a source
#: file, the re-parse of a rendered CSV document) sets it through :func:`csv_reader`, so the only
#: bound a field meets is :data:`MAX_FIELD_CHARS`, checked when the rows are read, before anything
#: is written (``csv``'s own default, 131,072 characters, would refuse a valid field later, after
#: a table was written, with an error that names no field).
CSV_FIELD_LIMIT = 2**31 - 1

#: JSON Lines are separated by LF (CRLF and a lone CR are accepted too). Not ``str.splitlines``:
#: it also splits at U+0085, U+2028 and U+2029, which JSON strings may hold unescaped.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")

_SUFFIXES = ("jsonl", "json", "csv", "parquet")


class _Duplicated(dict):
    """A JSON object in which a key occurs twice (``key``: the first such key). ``json.loads``
    would keep the last value silently; :func:`value_problem` and :func:`_checked` report it."""

    key: str = ""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of every JSON parse here: a plain dict, or a :class:`_Duplicated`
    naming the first repeated key."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    dup = _Duplicated(obj)
    dup.key = next(k for k, _ in pairs if k in seen or seen.add(k))
    return dup


class _Overflowed(float):
    """A JSON number too large for a float (``1e400``): ``float`` reads it as infinity.
    ``text`` is the number as written, so :func:`value_problem` names it instead of "Infinity"."""

    text: str = ""


def _float(text: str) -> float:
    """``parse_float`` of every JSON parse here: ``float(text)``, or an :class:`_Overflowed`
    infinity when the number written is beyond the largest float."""
    v = float(text)
    if math.isinf(v):
        v = _Overflowed(v)
        v.text = text
    return v


def _int(text: str) -> int | float:
    """``parse_int`` of every JSON parse here: ``int(text)``, or an :class:`_Overflowed` infinity
    when the integer has more digits than Python converts (``sys.get_int_max_str_digits()``,
    4,300), where ``int`` raises a ``ValueError`` that is not a ``JSONDecodeError``; such a number
    is beyond the largest float as well."""
    try:
        return int(text)
    except ValueError:
        v = _Overflowed(math.inf)
        v.text = text
        return v


class JSONTooDeep(json.JSONDecodeError):
    """JSON nested deeper than Python's parser can follow (its recursion limit, about 1,000 arrays
    or objects inside each other): a ``JSONDecodeError`` (``msg``: :data:`TOO_DEEP`), so every
    caller that reports invalid JSON reports it the same way, never as a ``RecursionError``."""


#: ``msg`` of :class:`JSONTooDeep`.
TOO_DEEP = "arrays or objects nested too deeply (more than about 1,000 levels)"


def loads(text: str) -> Any:
    """``json.loads`` that marks every object giving a key twice (:class:`_Duplicated`; plain
    ``json.loads`` keeps the last value silently), for :func:`refuse_duplicate_keys`. Raises
    ``json.JSONDecodeError`` as ``json.loads`` does, and :class:`JSONTooDeep` (a subclass, at
    line 1, column 1) for nesting deeper than the parser can follow."""
    try:
        return json.loads(text, object_pairs_hook=_object, parse_float=_float, parse_int=_int)
    except RecursionError:
        raise JSONTooDeep(TOO_DEEP, text, 0) from None


def _twice(key: str, at: str = "") -> str:
    return f"key {key!r} is given twice{at}; JSON would keep the last one silently"


def read_rows(uri: str, json_cells: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Read a JSONL, JSON (a list of objects), CSV or Parquet file (local path or ``hf://`` URI) into dicts.

    ``json_cells`` names the fields that hold a list or an object, each with the words its error
    uses (``{"choices": "a list of {label, text} choices"}``). A CSV cell can only hold text, so
    in a CSV file those fields are JSON text in their cells: they are decoded here, once, for
    every study (an empty cell is ``None``), and the rows of the four formats are equal. Other
    formats hold lists and objects as they are.

    Every dict carries ``__row__``, the 1-based row its errors name: the line of a JSONL record,
    the line where a CSV record starts (the header is line 1), the element of a JSON list, the
    record of a Parquet file. Text files are UTF-8 (a leading byte-order mark is dropped); JSONL
    lines may end in LF, CRLF or CR. CSV values are strings; Parquet nulls are ``None``.

    Raises :class:`InputError` for: no path (an empty string), a path that does not exist, a directory, an empty file, an
    unknown extension, bytes that are not UTF-8 (the line is named; a UTF-16 file is named as
    such), a JSONL line that is not a JSON object, a byte-order mark inside the file, a CSV
    record with more or fewer values than the header or a repeated header name, a file with no
    rows, and — in any format — a number that is not finite (``NaN``, ``Infinity``, ``1e999``), a
    string longer than :data:`MAX_FIELD_CHARS`, or a JSON object giving a key twice (a row's own key
    is the field; a key repeated inside a field's object or a CSV cell's JSON names that field and
    where in it), which ``json.loads`` would resolve silently to the last value (the field is
    named). ``hf://`` URIs are read
    through ``fsspec`` (``huggingface_hub``'s file system).
    """
    if not uri.strip():  # '<adapter>:' with nothing after it: Path('') would be the working directory
        raise InputError(repr(uri), "no path given")
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
    if suffix not in _SUFFIXES:
        raise InputError(uri, f"unsupported file type {suffix!r}; use .jsonl, .json, .csv or .parquet")
    if suffix == "parquet":
        rows = _read_parquet(uri, is_remote)
    else:
        text = decode_utf8(_read_bytes(uri, is_remote), uri)
        rows = {"jsonl": _parse_jsonl, "json": _parse_json, "csv": _parse_csv}[suffix](text, uri)
    if not rows:
        raise InputError(uri, "file has no rows")
    if suffix == "csv" and json_cells:
        for row in rows:
            _decode_json_cells(row, json_cells, uri)
    return rows


def _decode_json_cells(row: dict[str, Any], json_cells: Mapping[str, str], uri: str) -> None:
    """Decode the CSV cells of ``row`` named by ``json_cells`` from JSON text, in place (an empty
    cell becomes ``None``); :class:`InputError` naming the row and field for text that is not JSON."""
    for key, expected in json_cells.items():
        v = row.get(key)
        if not isinstance(v, str):
            continue
        if not v.strip():
            row[key] = None
            continue
        try:
            row[key] = loads(v)
        except json.JSONDecodeError as exc:
            raise InputError(
                uri,
                f"expected {expected} as JSON text in the CSV cell, got {v!r:.80} ({exc.msg})",
                row=row["__row__"],
                field=key,
            ) from None
        problem = value_problem(row[key])
        if problem is not None:
            raise InputError(uri, problem, row=row["__row__"], field=key)


def _read_bytes(uri: str, is_remote: bool) -> bytes:
    if not is_remote:
        return Path(uri).read_bytes()
    import fsspec  # installed with huggingface_hub / pandas extras

    try:
        with fsspec.open(uri, "rb") as fh:
            return fh.read()
    except Exception as exc:  # offline mode, no such repository or file, no network: each its own type
        raise InputError(uri, f"cannot read it: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    """``<type>: <first line of the message>`` of an exception from a file system or reader."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def decode_utf8(data: bytes, source: str, error: type[InputError] = InputError) -> str:
    """``data`` decoded as UTF-8, a leading byte-order mark dropped.

    Raises ``error`` (:class:`InputError` or a subclass) naming ``source`` and the 1-based line
    (``row``) and column of the first byte that is not UTF-8, or saying the file is UTF-16 when it
    starts with a UTF-16 byte-order mark."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise error(source, "the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(
            source, f"not valid UTF-8: byte 0x{data[exc.start]:02x} at column {column} ({exc.reason})", row=line
        ) from None


def _json_line(line: str, uri: str, i: int) -> Any:
    if line.startswith("\ufeff"):
        raise InputError(
            uri, "a byte-order mark (U+FEFF) inside the file (were two files concatenated?); remove it", row=i
        )
    try:
        return loads(line)
    except json.JSONDecodeError as exc:
        sep = " " if exc.msg.endswith(" at") else "; "  # "Unterminated string starting at column 31"
        raise InputError(uri, f"not valid JSON ({exc.msg}{sep}column {exc.colno})", row=i) from exc


def _parse_jsonl(text: str, uri: str) -> list[dict[str, Any]]:
    rows = []
    for i, line in enumerate(_LINE_BREAK.split(text), start=1):
        if not line.strip():
            continue
        obj = _json_line(line, uri, i)
        if not isinstance(obj, dict):
            raise InputError(uri, "a JSONL row must be an object", row=i)
        rows.append(_checked(obj, uri, i))
    return rows


def _parse_json(text: str, uri: str) -> list[dict[str, Any]]:
    if not text.strip():
        raise InputError(uri, "file has no rows")
    try:
        data = loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise InputError(uri, f"not valid JSON ({exc.msg}{' ' if exc.msg.endswith(' at') else '; '}{where})") from exc
    if not isinstance(data, list):
        raise InputError(uri, f"a .json file must hold a list of objects, got {_kind(data)}")
    rows = []
    for i, obj in enumerate(data, start=1):
        if not isinstance(obj, dict):
            raise InputError(uri, f"a list element must be an object, got {_kind(obj)}", row=i)
        rows.append(_checked(obj, uri, i))
    return rows


def csv_reader(text: str, **kwargs: Any):
    """``csv.reader`` over ``text`` (``newline=""``, so quoted line breaks stay in their cell),
    with ``csv``'s field limit at :data:`CSV_FIELD_LIMIT`: the one way the project parses CSV text.
    A field's length is checked by :func:`value_problem` against :data:`MAX_FIELD_CHARS`, which
    names the field."""
    if csv.field_size_limit() < CSV_FIELD_LIMIT:
        csv.field_size_limit(CSV_FIELD_LIMIT)
    return csv.reader(io.StringIO(text, newline=""), **kwargs)


def _parse_csv(text: str, uri: str) -> list[dict[str, Any]]:
    reader = csv_reader(text, strict=True)  # the length check below names the field
    header: list[str] | None = None
    rows = []
    start = 1
    try:
        for values in reader:
            line, start = start, reader.line_num + 1
            if not values or (len(values) == 1 and not values[0].strip()):
                continue
            if header is None:
                header = values
                empty = next((k for k, h in enumerate(values, start=1) if not h.strip()), None)
                if empty is not None:
                    raise InputError(uri, f"column {empty} of the header has no name", row=line)
                dup = next((h for k, h in enumerate(values) if h in values[:k]), None)
                if dup is not None:
                    raise InputError(uri, "the header names this column twice", row=line, field=dup)
                continue
            if len(values) != len(header):  # a short row names its first column without a value
                raise InputError(
                    uri,
                    f"has {len(values)} values, the header has {len(header)} columns",
                    row=line,
                    field=header[len(values)] if len(values) < len(header) else None,
                )
            rows.append(_checked(dict(zip(header, values)), uri, line))
    except csv.Error as exc:
        raise InputError(uri, f"not valid CSV ({exc})", row=reader.line_num) from None
    return rows


def _read_parquet(uri: str, is_remote: bool) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        if is_remote:
            import fsspec

            with fsspec.open(uri, "rb") as fh:
                table = pq.read_table(fh)
        else:
            table = pq.read_table(uri)
    except Exception as exc:  # pyarrow (a damaged file) and fsspec (an unreachable URI) raise several types
        raise InputError(uri, f"cannot read parquet file: {_first_line(exc) if is_remote else exc}") from exc
    return [_checked(obj, uri, i) for i, obj in enumerate(table.to_pylist(), start=1)]


def _checked(obj: dict[str, Any], uri: str, i: int) -> dict[str, Any]:
    """``obj`` with ``__row__ = i``; :class:`InputError` naming the field of the first value that is
    a non-finite number, a string longer than :data:`MAX_FIELD_CHARS` or one holding a lone surrogate,
    or naming a key the row (or an object inside a field) gives twice."""
    if isinstance(obj, _Duplicated):
        raise InputError(uri, _twice(obj.key), row=i, field=obj.key)
    for key, value in obj.items():
        problem = value_problem(value)
        if problem is not None:
            raise InputError(uri, problem, row=i, field=str(key))
    obj["__row__"] = i
    return obj


#: A UTF-16 surrogate code point: a JSON escape such as backslash-ud800 decodes to one, but no UTF-8 text (a
#: table, a prompt, a cache key) can hold it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def value_problem(value: Any) -> str | None:
    """The problem of the first value inside ``value`` (depth first) that is a non-finite number, a
    string over :data:`MAX_FIELD_CHARS`, a string with a lone surrogate or a NUL (U+0000: no text
    format, table or prompt carries it as text — it would reach the txt, md, csv and html renderings
    raw, and PostgreSQL's TEXT cannot hold it) or a JSON object that gives a key twice; ``None`` when
    there is none. (An id is held to more: no control character at all, :func:`check_id_text`.)"""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        v, path = stack.pop()
        at = f" (at {path.lstrip('.')})" if path else ""
        if isinstance(v, str):
            if len(v) > MAX_FIELD_CHARS:
                return (
                    f"holds {len(v):,} characters{at}; the limit is {MAX_FIELD_CHARS:,} per field "
                    "(no model context takes more)"
                )
            nul = v.find("\x00")
            if nul >= 0:
                return (
                    f"holds a NUL character (U+0000){at} at character {nul + 1}, which is not text; "
                    "remove it (a file cut or padded by a tool may hold it)"
                )
            lone = _SURROGATE.search(v)
            if lone is not None:
                return (
                    f"holds a lone surrogate \\u{ord(lone.group()):04x}{at} at character {lone.start() + 1} "
                    "(half of a UTF-16 pair, not a character); write the character itself"
                )
        elif isinstance(v, float):
            if isinstance(v, _Overflowed):
                written = v.text if len(v.text) <= 40 else f"{v.text[:20]}… ({len(v.text):,} characters long)"
                return (
                    f"the number {written}{at} is beyond the largest finite number (about 1.8e308); "
                    "write a smaller number, or text in quotes"
                )
            if not math.isfinite(v):
                name = "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"
                return f"{name}{at} is not a finite number (write null for a missing value)"
        elif isinstance(v, dict):
            if isinstance(v, _Duplicated):
                return _twice(v.key, at)
            stack.extend((x, f"{path}.{k}") for k, x in reversed(list(v.items())))
        elif isinstance(v, (list, tuple)):
            stack.extend((x, f"{path}[{k}]") for k, x in reversed(list(enumerate(v))))
    return None


def _kind(v: Any) -> str:
    """``an object``, ``a list``, ``a boolean``, ``null``, ``a number`` or ``a string``."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, (list, tuple)):
        return "a list"
    if isinstance(v, (int, float)):
        return "a number"
    return "a string" if isinstance(v, str) else type(v).__name__


def read_text(path: str | Path, what: str = "file", error: type[InputError] = InputError) -> str:
    """The text of the file at ``path`` (a path or an ``importlib.resources`` traversable): the one
    way the project reads a text file, so that a leading UTF-8 byte-order mark is dropped
    (:func:`decode_utf8`) before anyone looks at the first character to tell a format.

    Raises ``error`` (an :class:`InputError` subclass) naming the file when it does not exist,
    cannot be read, or is not UTF-8 (the line and column are named)."""
    try:
        data = path.read_bytes() if hasattr(path, "read_bytes") else Path(path).read_bytes()
    except FileNotFoundError:
        raise error(str(path), f"{what} not found") from None
    except IsADirectoryError:
        raise error(str(path), f"the {what} is a directory") from None
    except OSError as exc:
        raise error(str(path), f"cannot read the {what}: {exc}") from exc
    return decode_utf8(data, str(path), error)


def read_json_file(path: str | Path, what: str = "file", error: type[InputError] = InputError) -> Any:
    """Parse the JSON file at ``path`` (a path or an ``importlib.resources`` traversable).

    The file is read by :func:`read_text` (UTF-8, a leading byte-order mark dropped, as in
    :func:`read_rows`). Raises ``error`` (an :class:`InputError` subclass) naming the file when it
    does not exist, cannot be read, is empty, is not UTF-8, or is not valid JSON (with line and column),
    or when an object in it gives a key twice (``field``: the dotted path to that key).
    """
    text = read_text(path, what, error)
    if not text.strip():
        raise error(str(path), f"the {what} is empty")
    try:
        data = loads(text)
    except json.JSONDecodeError as exc:
        raise error(str(path), f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    refuse_duplicate_keys(data, str(path), error=error)
    return data


def refuse_duplicate_keys(
    value: Any, source: str, row: int | None = None, error: type[InputError] = InputError
) -> None:
    """Raise ``error`` naming ``source``, ``row`` and the dotted path of the key (``field``, e.g.
    ``failure_modes.missing``) when an object inside ``value`` (parsed by :func:`loads`) gives a key
    twice; the first such key, depth first."""
    stack: list[tuple[Any, list[str]]] = [(value, [])]
    while stack:
        v, path = stack.pop()
        if isinstance(v, _Duplicated):
            raise error(source, _twice(v.key), row=row, field=".".join([*path, v.key]).replace(".[", "["))
        if isinstance(v, dict):
            stack.extend((x, [*path, str(k)]) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, [*path, f"[{k}]"]) for k, x in reversed(list(enumerate(v))))


def spec_params(spec: str, query: str, allowed: Sequence[str]) -> dict[str, str]:
    """The ``k=v&...`` parameters (``query``) of the source spec ``spec``, such as ``construct?n=40&seed=7``.

    Raises :class:`InputError` naming ``spec`` for a parameter not in ``allowed`` (a typo such as
    ``sed=7`` would otherwise leave the default in place silently) or given twice (one value
    would be dropped silently)."""
    params: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in allowed:
            takes = f"allowed: {', '.join(allowed)}" if allowed else "this source takes no parameters"
            raise InputError(spec, f"unknown parameter {key!r}; {takes}")
        if key in params:
            raise InputError(spec, f"parameter {key!r} is given twice")
        params[key] = value
    return params


def required(row: dict[str, Any], key: str, source: str, row_no: int) -> Any:
    """``row[key]``; :class:`InputError` naming ``source``, the row and the field when it is
    missing, null or a blank string."""
    v = row.get(key)
    if v is None or (isinstance(v, str) and not v.strip()):
        raise InputError(source, "missing or empty", row=row_no, field=key)
    return v


#: Invisible format characters an id may hold: the zero-width non-joiner and joiner, which spell
#: words in Persian, the Indic scripts and emoji sequences.
_ID_FORMAT_ALLOWED = frozenset("\u200c\u200d")


def check_id_text(value: str, source: str, row_no: int, key: str) -> str:
    """``value``, an id as read; :class:`InputError` naming ``source``, the row and the field when
    it holds a control character (NUL, a tab, a line break, U+0000-U+001F, U+007F-U+009F), an
    invisible format character (Unicode category Cf: a bidirectional override such as U+202E, a
    zero-width space U+200B, a byte-order mark; the joiners U+200C and U+200D excepted) or is not
    in Unicode normalization form NFC. An id is a key in tables, file names and one-line messages:
    a control character is invisible there or breaks the line, a format character makes it read as
    another id (``abc\u202edef.pdf`` shows as ``abcfdp.fed``), and two ids that differ only in
    composition (``caf\u00e9`` and ``cafe\u0301``) look the same while the duplicate check sees two."""
    bad = next((c for c in value if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise InputError(source, f"an id must not hold a control character (U+{ord(bad):04X})", row=row_no, field=key)
    bad = next((c for c in value if unicodedata.category(c) == "Cf" and c not in _ID_FORMAT_ALLOWED), None)
    if bad is not None:
        raise InputError(
            source,
            f"an id must not hold an invisible format character (U+{ord(bad):04X} "
            f"{unicodedata.name(bad, 'unnamed')}): the id would read as another one",
            row=row_no,
            field=key,
        )
    if not unicodedata.is_normalized("NFC", value):
        nfc = unicodedata.normalize("NFC", value)
        raise InputError(
            source,
            f"an id must be in Unicode normalization form NFC; write {nfc!r} (the same text composed), "
            "or two ids that look the same could be counted as two items",
            row=row_no,
            field=key,
        )
    return value


def required_id(row: dict[str, Any], key: str, source: str, row_no: int) -> str:
    """``row[key]`` as an id: :func:`required_text` with ``numbers=True`` (``17`` is the id
    ``"17"``), then :func:`check_id_text`."""
    return check_id_text(required_text(row, key, source, row_no, numbers=True), source, row_no, key)


def required_text(row: dict[str, Any], key: str, source: str, row_no: int, numbers: bool = False) -> str:
    """``row[key]`` as stripped text (:func:`required`). ``numbers=True`` (an id, an age) takes a
    number as its decimal text; otherwise (prose: a question, a passage) a number is an error, as
    an object, a list or a boolean always is: :class:`InputError` naming ``source``, the row and
    the field (``str()`` of it would be silently wrong text)."""
    v = required(row, key, source, row_no)
    kinds = (str, int, float) if numbers else str
    if isinstance(v, bool) or not isinstance(v, kinds):
        raise InputError(source, f"expected text, got {_kind(v)}", row=row_no, field=key)
    return str(v).strip()
