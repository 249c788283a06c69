"""Renderers T(C_x, f): one record, nine surface forms (paper §4.2; the paper's four and five more).

Each renderer turns a :class:`~metamorph.studies.format_robustness.records.SourceInstance` into document bytes and has a
parser that recovers the ordered (field, value-text) pairs, so the three constraints of §4.2
can be checked on every instance:

* **semantic invariance** — ``parse(render(x)) == [(k, canonical_text(v)) for k, v in x.fields]``
  for every format (:func:`check_semantic_invariance`);
* **representational faithfulness** — CSV puts each field in its own cell (a header row of field
  names and one data row), JSON is one object, MD is a two-column table, TXT is ``field: value``
  lines;
* **instruction isolation** — the task prompt P is never written into the document; it travels
  in the chat message and is identical for every format.

A field value may hold any text, including every Unicode line break (:data:`LINE_BREAKS`,
also ``\\r\\n``): TXT and MD escape them (:func:`_one_line`), JSON escapes them as ``\\u``
sequences, CSV quotes the cell; every parser gives the exact value back.

Five more formats are produced by well-kept libraries and read back by *independent* readers
(:mod:`metamorph.studies.format_robustness.readers`), never by the renderer's own code:

* ``pdf`` — reportlab, one ``field: value`` line per field in DejaVu Sans (the font file matplotlib
  ships), read back by pypdf; a long value wraps, a wrapped line ends in a single ``\\``; a
  character the font has no glyph for is an :class:`UnwritableCharacter` error naming it (the
  ``rendered_documents`` row of that document is then an error row);
* ``docx`` — python-docx, a two-column table (header ``Field | Value``), read back by python-docx;
* ``xlsx`` — openpyxl, a header row of field names and one data row (numbers and booleans as native
  cells), read back by openpyxl;
* ``html`` — the standard library's :func:`html.escape`, a two-column table, read back by
  :class:`html.parser.HTMLParser`;
* ``yaml`` — PyYAML ``safe_dump`` (one mapping, native scalars), read back by ``yaml.safe_load``.

PDF lines and the cells of docx and xlsx carry a string in the escaped text of TXT, extended to
every control character (:func:`_escaped`); html and yaml carry it as it is. pdf, docx and xlsx are
binary (:data:`~metamorph.studies.format_robustness.readers.BINARY_FORMATS`): a
:class:`RenderedDocument` holds their bytes and, as ``text``, what the format's named extraction
reads back from them (``extract:pypdf``, ``extract:docx``, ``extract:openpyxl``). Their bytes do
not depend on the time of rendering (fixed document dates, zip entries dated 1980-01-01).

The registry (:data:`RENDERERS`, :func:`register_renderer`) can be extended with more formats.
A renderer's ``version`` is part of every cache key that used it (``GenerationRequest.
renderer_version``): any change of a renderer's output must bump it, so the cache never serves
an old reply to a new document (tests/format_robustness/test_renderers.py pins the output of
each version on a fixture).
"""

from __future__ import annotations

import csv
import datetime
import functools
import html
import importlib.util
import io
import json
import re
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from metamorph.errors import InputError
from metamorph.providers.base import sha256_hex
from metamorph.studies.format_robustness import readers
from metamorph.studies.format_robustness.records import SourceInstance, canonical_text
from metamorph.studies.format_robustness.vocab import FORMATS

__all__ = [
    "DEFAULT_FORMATS",
    "KNOWN_FORMATS",
    "LINE_BREAKS",
    "PDF_FONT",
    "RENDERERS",
    "RenderedDocument",
    "Renderer",
    "UnwritableCharacter",
    "check_semantic_invariance",
    "expected_pairs",
    "parse_csv",
    "parse_json",
    "parse_md",
    "parse_txt",
    "register_renderer",
    "render",
    "render_csv",
    "render_json",
    "render_md",
    "render_docx",
    "render_html",
    "render_pdf",
    "render_txt",
    "render_xlsx",
    "render_yaml",
]


@dataclass(frozen=True)
class Renderer:
    """A document format: ``render`` -> str (bytes when ``binary``), ``parse`` -> ordered
    (field, value-text) pairs of what ``render`` returned. ``extraction``: the named extraction
    that gives the text of a binary document (``extract:pypdf`` …; ``None`` for a text format)."""

    name: str
    media_type: str
    extension: str
    version: str
    render: Callable[[SourceInstance], str | bytes]
    parse: Callable[[str | bytes], list[tuple[str, str]]]
    binary: bool = False
    extraction: str | None = None


@dataclass(frozen=True)
class RenderedDocument:
    """A rendered document with its provenance (a row of ``rendered_documents``).

    ``text``: the document (text formats) or, for a binary format, the text its named
    ``extraction`` reads back from ``data`` (the bytes of the file)."""

    instance_id: str
    dataset: str
    format: str
    media_type: str
    renderer_version: str
    text: str
    data: bytes | None = None
    extraction: str | None = None

    @property
    def content(self) -> bytes:
        """The document's bytes: the file of a binary format, else the UTF-8 text."""
        return self.data if self.data is not None else self.text.encode("utf-8")

    @property
    def sha256(self) -> str:
        return sha256_hex(self.content)

    @property
    def filename(self) -> str:
        return f"{self.instance_id}.{RENDERERS[self.format].extension}"


#: Every character :meth:`str.splitlines` treats as a line boundary (``\r\n`` is CR + LF).
#: TXT and MD are line-oriented, so none of them may appear raw inside a value.
LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}
_ESCAPES.update({b: f"\\u{ord(b):04x}" for b in LINE_BREAKS if b not in _ESCAPES})


def _one_line(value: str) -> str:
    """Escape ``value`` onto one line: ``\\`` -> ``\\\\``, LF -> ``\\n``, CR -> ``\\r`` and every
    other line break of :data:`LINE_BREAKS` (VT, FF, FS, GS, RS, NEL, LS, PS) -> ``\\uXXXX``
    (4 lowercase hex digits). :func:`_undo_one_line` inverts it exactly."""
    return "".join(_ESCAPES.get(c, c) for c in value)


def _undo_one_line(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            if (
                nxt == "u"
                and re.fullmatch(r"[0-9a-f]{4}", value[i + 2 : i + 6])
                and chr(int(value[i + 2 : i + 6], 16)) in LINE_BREAKS
            ):
                out.append(chr(int(value[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append({"n": "\n", "r": "\r", "\\": "\\", "|": "|"}.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


# --- TXT: "field: value" lines -------------------------------------------------------------
def render_txt(x: SourceInstance) -> str:
    return "".join(f"{k}: {_one_line(canonical_text(v))}\n" for k, v in x.fields)


def parse_txt(text: str) -> list[tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        if not line:
            continue
        key, sep, value = line.partition(": ")
        if not sep:  # an empty value renders as "key: " and may lose its trailing space
            key, sep, value = line.rstrip().partition(":")
        pairs.append((key, _undo_one_line(value)))
    return pairs


# --- MD: a two-column table ------------------------------------------------------------------
def _md_cell(value: str) -> str:
    return _one_line(value).replace("|", "\\|")


def render_md(x: SourceInstance) -> str:
    lines = ["| Field | Value |", "| --- | --- |"]
    lines += [f"| {_md_cell(k)} | {_md_cell(canonical_text(v))} |" for k, v in x.fields]
    return "\n".join(lines) + "\n"


def _split_md_row(line: str) -> list[str]:
    body = line.strip()
    if not (body.startswith("|") and body.endswith("|")):
        raise ValueError(f"not a table row: {line!r}")
    body = body[1:-1]
    cells, cur, i = [], [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            cur.append(body[i : i + 2])
            i += 2
            continue
        if c == "|":
            cells.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    cells.append("".join(cur))
    # one space of padding each side is part of the syntax, not of the value
    return [
        _undo_one_line(cell[1:-1] if cell.startswith(" ") and cell.endswith(" ") and len(cell) >= 2 else cell.strip())
        for cell in cells
    ]


def parse_md(text: str) -> list[tuple[str, str]]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        raise ValueError("markdown table needs a header and a separator row")
    rows = [_split_md_row(ln) for ln in lines[2:]]
    return [(r[0], r[1]) for r in rows]


# --- JSON: one object -----------------------------------------------------------------------
#: Line breaks JSON allows raw inside strings but many readers (ECMAScript before 2019, line
#: splitters) break on: written as ``\\uXXXX`` escapes (JSON already escapes every C0 control).
_JSON_RAW_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def render_json(x: SourceInstance) -> str:
    text = json.dumps(dict(x.fields), ensure_ascii=False, indent=2) + "\n"
    return "".join(_JSON_RAW_BREAKS.get(c, c) for c in text)


def parse_json(text: str) -> list[tuple[str, str]]:
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise ValueError("JSON document must be an object")
    return [(k, canonical_text(v)) for k, v in obj.items()]


# --- CSV: header row of field names, one data row; each field in its own cell -----------------
def _csv_cell(value: str, alone: bool) -> str:
    # RFC 4180 quoting. Python's csv writer with lineterminator "\n" leaves a lone CR unquoted,
    # which a reader then takes as a row break: quote on CR too. A lone empty cell is quoted
    # ("") so the row is not read as blank.
    if any(c in value for c in ',"\r\n') or (alone and value == ""):
        return '"' + value.replace('"', '""') + '"'
    return value


def render_csv(x: SourceInstance) -> str:
    alone = len(x.fields) == 1
    header = ",".join(_csv_cell(k, alone) for k, _ in x.fields)
    row = ",".join(_csv_cell(canonical_text(v), alone) for _, v in x.fields)
    return f"{header}\n{row}\n"


def parse_csv(text: str) -> list[tuple[str, str]]:
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise ValueError("CSV document must have one header row and one data row of equal width")
    return list(zip(rows[0], rows[1]))


# --- shared by pdf, docx and xlsx: escaped cell text ----------------------------------------------
def _escaped(value: str) -> str:
    """:func:`_one_line` and every other control character (Unicode category Cc: tab, NUL …) as
    ``\\uXXXX``: the text holds no character without a glyph or that XML 1.0 cannot carry.
    :func:`metamorph.studies.format_robustness.readers.unescape` inverts it."""
    return "".join(_ESCAPES.get(c) or (f"\\u{ord(c):04x}" if unicodedata.category(c) == "Cc" else c) for c in value)


#: The date written into every docx / xlsx / pdf (documents do not depend on when they were made).
_EPOCH = datetime.datetime(2000, 1, 1, 0, 0, 0)


def _stable_zip(data: bytes) -> bytes:
    """The zip archive ``data`` with every entry dated 1980-01-01 (the zip epoch), same order and content."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            entry = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            entry.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(entry, src.read(info.filename))
    return out.getvalue()


# --- PDF: reportlab, one "field: value" line per field ----------------------------------------------
#: The PDF font: DejaVu Sans as matplotlib ships it (Latin, Greek, Cyrillic, Hebrew, Arabic, many
#: symbols; no CJK ideographs and no emoji: those are :class:`UnwritableCharacter`).
PDF_FONT = "DejaVuSans"
_PDF_SIZE, _PDF_LEADING, _PDF_MARGIN = 10, 14, 40


class UnwritableCharacter(InputError):
    """A character the PDF font has no glyph for: the document cannot show it, so it is not made
    (an error row of ``rendered_documents`` naming the character, the instance and the format)."""


def _font_path() -> Path:
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("matplotlib (which ships the PDF font DejaVu Sans) is not installed")
    return Path(spec.submodule_search_locations[0]) / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"


@functools.cache
def _pdf_font():
    """The registered reportlab font (registered once per process)."""
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont

    font = TTFont(PDF_FONT, str(_font_path()))
    pdfmetrics.registerFont(font)
    return font


def _pdf_line(key: str, value: str) -> str:
    """``key: value`` escaped (:func:`_escaped`), the value's trailing white space as ``\\uXXXX``
    (a PDF reader drops white space at the end of a line)."""
    v = _escaped(value)
    stripped = v.rstrip()
    v = stripped + "".join(f"\\u{ord(c):04x}" for c in v[len(stripped) :])
    return f"{_escaped(key)}: {v}"


_ATOM = re.compile(r"\\(?:u[0-9a-f]{4}|.)|.", re.DOTALL)


def _wrap(line: str, width: float, measure: Callable[[str], float]) -> list[str]:
    """``line`` cut into pieces no wider than ``width`` with the continuation mark ``\\`` after every
    piece but the last: after the last space that fits, else inside a word; an escape sequence is
    never cut."""
    pieces, cur, mark = [], [], measure("\\")
    cur_w = 0.0
    for atom in _ATOM.findall(line):
        w = measure(atom)
        if cur and cur_w + w + mark > width:
            cut = max((i for i, a in enumerate(cur) if a == " "), default=-1) + 1 or len(cur)
            pieces.append("".join(cur[:cut]) + "\\")
            cur = cur[cut:]
            cur_w = sum(measure(a) for a in cur)
        cur.append(atom)
        cur_w += w
    pieces.append("".join(cur))
    return pieces


def render_pdf(x: SourceInstance) -> bytes:
    """A4 pages of ``field: value`` lines (:func:`_pdf_line`) in :data:`PDF_FONT` 10 pt, wrapped
    at the margins. Raises :class:`UnwritableCharacter` naming the first character the font has
    no glyph for (and its field)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfbase.pdfmetrics import stringWidth
    from reportlab.pdfgen import canvas

    font = _pdf_font()
    glyphs = font.face.charToGlyph
    lines = []
    for k, v in x.fields:
        line = _pdf_line(k, canonical_text(v))
        missing = next((c for c in line if ord(c) not in glyphs), None)
        if missing is not None:
            name = unicodedata.name(missing, "unnamed")
            raise UnwritableCharacter(
                x.dataset,
                f"pdf: the font {PDF_FONT} has no glyph for U+{ord(missing):04X} {name} ({missing!r}) in field {k!r}",
                field=f"instance {x.instance_id}",
            )
        lines.append(line)
    widths: dict[str, float] = {}

    def measure(s: str) -> float:
        if s not in widths:
            widths[s] = stringWidth(s, PDF_FONT, _PDF_SIZE)
        return widths[s]

    page_w, page_h = A4
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=A4, invariant=1)
    y = page_h - _PDF_MARGIN
    c.setFont(PDF_FONT, _PDF_SIZE)
    for line in lines:
        for piece in _wrap(line, page_w - 2 * _PDF_MARGIN, measure):
            if y < _PDF_MARGIN:
                c.showPage()
                c.setFont(PDF_FONT, _PDF_SIZE)
                y = page_h - _PDF_MARGIN
            c.drawString(_PDF_MARGIN, y, piece)
            y -= _PDF_LEADING
    c.showPage()
    c.save()
    return buf.getvalue()


# --- DOCX: python-docx, a two-column table --------------------------------------------------------
#: The styles the Word document uses (the rest of python-docx's default template is left out).
_DOCX_STYLES = ("Normal", "DefaultParagraphFont", "TableNormal", "NoList", "TableGrid")


@functools.cache
def _docx_template() -> bytes:
    """python-docx's default document without the parts a one-table document does not use (styles
    with effects, custom XML, thumbnail, latent and unused styles): a tenth of the size and time."""
    from docx import Document
    from docx.oxml.ns import qn

    doc = Document()
    for rels, unused in ((doc.part.rels, ("stylesWithEffects", "customXml")), (doc.part.package.rels, ("thumbnail",))):
        for rid in [rid for rid, rel in rels.items() if rel.reltype.rsplit("/", 1)[-1] in unused]:
            rels.pop(rid)
    styles = doc.styles.element
    for el in styles.findall(qn("w:latentStyles")):
        styles.remove(el)
    for el in styles.findall(qn("w:style")):
        if el.get(qn("w:styleId")) not in _DOCX_STYLES:
            styles.remove(el)
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def render_docx(x: SourceInstance) -> bytes:
    """A Word document holding one table (style Table Grid): header ``Field | Value``, then one row
    per field (cells :func:`_escaped`)."""
    from docx import Document

    doc = Document(io.BytesIO(_docx_template()))
    table = doc.add_table(rows=1, cols=2)
    table.style = "Table Grid"
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "Field", "Value"
    for k, v in x.fields:
        cells = table.add_row().cells
        cells[0].text, cells[1].text = _escaped(k), _escaped(canonical_text(v))
    props = doc.core_properties
    props.created = props.modified = props.last_printed = _EPOCH
    props.revision = 1
    buf = io.BytesIO()
    doc.save(buf)
    return _stable_zip(buf.getvalue())


def _xlsx_exact(v) -> bool:
    """Whether a spreadsheet number cell holds ``v`` exactly: booleans and ``None`` always, a whole
    number within ±2**53 (binary64), a float that 15 significant digits (what a spreadsheet shows
    and keeps) give back and that is not whole (a cell does not tell 37.0 from 37)."""
    if v is None or isinstance(v, bool):
        return True
    if isinstance(v, int):
        return abs(v) <= 2**53
    return not v.is_integer() and float(f"{v:.15g}") == v


# --- XLSX: openpyxl, a header row and one data row ---------------------------------------------------
def render_xlsx(x: SourceInstance) -> bytes:
    """A workbook of one sheet ``record``: row 1 the field names, row 2 the values (numbers and
    booleans as native cells, an empty value as an empty cell, text as a text cell — never a
    formula — :func:`_escaped`). A number a spreadsheet cell does not hold exactly
    (:func:`_xlsx_exact`) is a text cell of its canonical text."""
    from openpyxl import Workbook
    from openpyxl.writer.excel import ExcelWriter

    wb = Workbook()
    ws = wb.active
    ws.title = "record"
    for col, (k, v) in enumerate(x.fields, start=1):
        head = ws.cell(row=1, column=col, value=_escaped(k))
        head.data_type = "s"
        cell = ws.cell(row=2, column=col)
        if isinstance(v, str) or not _xlsx_exact(v):
            v = canonical_text(v)
            cell.value = _escaped(v)
            cell.data_type = "s"
        else:
            cell.value = v
    wb.properties.created = wb.properties.modified = _EPOCH
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        ExcelWriter(wb, archive).save()  # openpyxl's save() would stamp the time of saving
    return _stable_zip(buf.getvalue())


# --- HTML: the standard library's html.escape, a two-column table -------------------------------------
_HTML_HEAD = (
    '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n<title>Record</title>\n'
    "<style>th, td { white-space: pre-wrap; text-align: left; vertical-align: top; }</style>\n"
    "</head>\n<body>\n<table>\n<thead><tr><th>Field</th><th>Value</th></tr></thead>\n<tbody>\n"
)


def _html_text(value: str) -> str:
    # a CR is written as a character reference: an HTML parser turns a raw CR (and CR LF) into LF
    return html.escape(value, quote=True).replace("\r", "&#13;")


def render_html(x: SourceInstance) -> str:
    """An HTML5 page holding one table: ``<th>`` the field name, ``<td>`` the value, every text
    :func:`html.escape`-d (CR as ``&#13;``); cells keep their line breaks (``white-space: pre-wrap``)."""
    rows = "".join(
        f'<tr><th scope="row">{_html_text(k)}</th><td>{_html_text(canonical_text(v))}</td></tr>\n' for k, v in x.fields
    )
    return f"{_HTML_HEAD}{rows}</tbody>\n</table>\n</body>\n</html>\n"


# --- YAML: PyYAML, one mapping ---------------------------------------------------------------------
#: Characters a YAML reader takes as a line break (NEL, LS, PS) or that it cannot read raw (other
#: controls): a string holding one is written double-quoted, where PyYAML escapes them (``\\N`` …).
_YAML_QUOTE = frozenset("\x85\u2028\u2029")


@functools.cache
def _yaml_dumper():
    import yaml

    class Dumper(yaml.SafeDumper):
        """``SafeDumper`` writing a string with a NEL, LS, PS or control character double-quoted."""

    def represent_str(dumper, value: str):
        quote = any(c in _YAML_QUOTE or (unicodedata.category(c) == "Cc" and c not in "\n") for c in value)
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if quote else None)

    Dumper.add_representer(str, represent_str)
    return Dumper


def render_yaml(x: SourceInstance) -> str:
    """One YAML mapping in field order with native scalars (PyYAML ``safe_dump``, Unicode kept,
    lines not folded); a string that YAML would read as another type is quoted by PyYAML, one with
    a NEL, LS, PS or a control character other than LF is double-quoted (escaped)."""
    import yaml

    return yaml.dump(dict(x.fields), Dumper=_yaml_dumper(), allow_unicode=True, sort_keys=False, width=2**31 - 1)


def _reader(fmt: str) -> Callable[[str | bytes], list[tuple[str, str]]]:
    return lambda data: readers.read_pairs(fmt, data)


RENDERERS: dict[str, Renderer] = {}


def register_renderer(renderer: Renderer) -> None:
    """Add a format to the registry (raises ``ValueError`` if the name is taken)."""
    if renderer.name in RENDERERS:
        raise ValueError(f"renderer {renderer.name!r} is already registered")
    RENDERERS[renderer.name] = renderer


for _r in (
    # -2: every Unicode line break inside a value is escaped (was: only LF/CR; others were rejected).
    Renderer("txt", "text/plain", "txt", "txt-2", render_txt, parse_txt),
    Renderer("md", "text/markdown", "md", "md-2", render_md, parse_md),
    # -2: NEL, LS and PS are written as \\u escapes.
    Renderer("json", "application/json", "json", "json-2", render_json, parse_json),
    # -2: a cell holding a lone CR is quoted (was written bare and read back as a row break).
    Renderer("csv", "text/csv", "csv", "csv-2", render_csv, parse_csv),
    Renderer("html", "text/html", "html", "html-1", render_html, _reader("html")),
    Renderer("yaml", "application/yaml", "yaml", "yaml-1", render_yaml, _reader("yaml")),
    Renderer("pdf", "application/pdf", "pdf", "pdf-1", render_pdf, _reader("pdf"), True, readers.EXTRACTIONS["pdf"]),
    Renderer(
        "docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "docx",
        "docx-1",
        render_docx,
        _reader("docx"),
        True,
        readers.EXTRACTIONS["docx"],
    ),
    Renderer(
        "xlsx",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "xlsx",
        "xlsx-1",
        render_xlsx,
        _reader("xlsx"),
        True,
        readers.EXTRACTIONS["xlsx"],
    ),
):
    register_renderer(_r)

#: Every registered format (the paper's four first): what ``--formats`` accepts.
KNOWN_FORMATS: tuple[str, ...] = tuple(RENDERERS)

#: The study's formats in baseline-first order (TXT is the baseline of Table 2; :data:`.vocab.FORMATS`).
DEFAULT_FORMATS = FORMATS


def expected_pairs(x: SourceInstance) -> list[tuple[str, str]]:
    return [(k, canonical_text(v)) for k, v in x.fields]


def check_semantic_invariance(x: SourceInstance, doc: RenderedDocument) -> None:
    """Raise :class:`InputError` unless the format's parser recovers exactly ``x.fields``.

    Also enforces instruction isolation: the task prompt must not occur in the document.
    """
    r = RENDERERS[doc.format]
    try:
        got = r.parse(doc.data if r.binary else doc.text)
    except Exception as exc:  # a parser failure is an invariance failure
        raise InputError(
            x.dataset, f"{doc.format} parser failed on the rendered document: {exc}", field=f"instance {x.instance_id}"
        ) from exc
    want = expected_pairs(x)
    if got != want:
        diff = next(((i, w, g) for i, (w, g) in enumerate(zip(want, got)) if w != g), (len(got), None, None))
        raise InputError(
            x.dataset,
            f"{doc.format} round trip changed the record at pair {diff[0]}: expected {diff[1]!r}, parsed {diff[2]!r}",
            field=f"instance {x.instance_id}",
        )
    if x.task_prompt and x.task_prompt.strip() and x.task_prompt.strip() in doc.text:
        raise InputError(
            x.dataset, "task prompt leaked into the document (instruction isolation)", field=f"instance {x.instance_id}"
        )


def render(x: SourceInstance, fmt: str, *, check: bool = True) -> RenderedDocument:
    """Render ``x`` as ``fmt`` (a key of :data:`RENDERERS`); verify invariance when ``check``.
    A binary document's ``text`` is what its named extraction reads back
    (:func:`metamorph.studies.format_robustness.readers.read_back`).

    Raises ``KeyError`` for an unknown format, :class:`UnwritableCharacter` when a character
    cannot be written in the format (pdf) and :class:`InputError` when the round trip fails.
    """
    if fmt not in RENDERERS:
        raise KeyError(f"unknown format {fmt!r}; registered: {sorted(RENDERERS)}")
    r = RENDERERS[fmt]
    out = r.render(x)
    if r.binary:
        try:
            text = readers.read_back(fmt, out)
        except Exception as exc:  # an unreadable file is an invariance failure
            raise InputError(
                x.dataset, f"{fmt} reader failed on the rendered document: {exc}", field=f"instance {x.instance_id}"
            ) from exc
        doc = RenderedDocument(x.instance_id, x.dataset, fmt, r.media_type, r.version, text, out, r.extraction)
    else:
        doc = RenderedDocument(x.instance_id, x.dataset, fmt, r.media_type, r.version, out)
    if check:
        check_semantic_invariance(x, doc)
    return doc
