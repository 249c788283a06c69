"""The document-QA pipeline of the example service: extract the upload's text, then answer.

Extraction (:data:`EXTRACTORS`) is chosen by the upload's media type: one function per type,
``bytes -> text``, for the nine formats of the document-format study. The text formats
(``text/plain``, ``text/markdown``, ``application/json``, ``text/csv``, ``application/yaml``) are
decoded as UTF-8; HTML is reduced to its text (the standard library's ``html.parser``: the cells
of a row joined by a tab, one row per line); PDF through pypdf (``extract_text`` of every page),
DOCX through python-docx (paragraphs, then each table row's cells joined by a tab), XLSX through
openpyxl (each sheet row's values joined by a tab). These are the service's own extractions, as a
real pipeline has its own: what they lose or add is part of the behaviour under test.

Answering (:data:`ANSWERERS`, chosen by ``DOC_SERVICE_ANSWERER``):

* ``rule`` (default): no model. The decision is the longest label of the question's answer space
  that occurs in the document (case-insensitive), else the first label; the evidence is the
  document's first non-empty line, cut to 12 words. Deterministic and instant: the tests' choice.
* ``model``: the packaged SmolLM2 (``SmolLM2-135M-Instruct.Q4_1.gguf``) through metamorph's
  ``llama_cpp`` provider (a worker process), greedy, decoding constrained to the JSON answer shape;
  the seed is passed on.

Errors: an unsupported media type, a text document that is not UTF-8, or a binary document its
reader cannot open raises :class:`ExtractionError` (the service answers HTTP 415 / 422).
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

__all__ = [
    "ANSWERERS",
    "EXTRACTORS",
    "ExtractionError",
    "answer",
    "answer_document",
    "answer_document_with_text",
    "answer_labels",
    "extract_text",
]


class ExtractionError(ValueError):
    """The upload cannot be read: ``status`` is the HTTP status the service answers (415, 422)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def _utf8(content: bytes) -> str:
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ExtractionError(f"the document is not UTF-8 text (byte {exc.start})", 422) from None


class _HTMLText(HTMLParser):
    """The text of an HTML document: a row's cells joined by a tab, a line per row or block."""

    _BREAKS = frozenset({"tr", "p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "table"})

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.cells: list[str] = []
        self.cell: list[str] | None = None
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "head"):
            self.skip += 1
        elif tag in ("td", "th"):
            self.cell = []
        elif tag in self._BREAKS:
            self._flush()

    def handle_endtag(self, tag):
        if tag in ("script", "style", "head"):
            self.skip = max(0, self.skip - 1)
        elif tag in ("td", "th") and self.cell is not None:
            self.cells.append("".join(self.cell).strip())
            self.cell = None
        elif tag in self._BREAKS:
            self._flush()

    def handle_data(self, data):
        if self.skip:
            return
        if self.cell is not None:
            self.cell.append(data)
        elif data.strip():
            self.cells.append(data.strip())

    def _flush(self):
        if self.cells:
            self.lines.append("\t".join(self.cells))
            self.cells = []


def _html(content: bytes) -> str:
    parser = _HTMLText()
    parser.feed(_utf8(content))
    parser.close()
    parser._flush()
    return "\n".join(parser.lines)


def _unreadable(kind: str, exc: Exception) -> ExtractionError:
    return ExtractionError(f"the {kind} document cannot be read ({type(exc).__name__}: {str(exc)[:200]})", 422)


def _pdf(content: bytes) -> str:
    from pypdf import PdfReader

    try:
        return "\n".join(page.extract_text() or "" for page in PdfReader(io.BytesIO(content)).pages)
    except Exception as exc:  # pypdf raises many types for a damaged file
        raise _unreadable("PDF", exc) from None


def _docx(content: bytes) -> str:
    import docx

    try:
        document = docx.Document(io.BytesIO(content))
    except Exception as exc:  # not a zip, or no word/document.xml
        raise _unreadable("DOCX", exc) from None
    lines = [p.text for p in document.paragraphs if p.text.strip()]
    lines += ["\t".join(cell.text for cell in row.cells) for table in document.tables for row in table.rows]
    return "\n".join(lines)


def _xlsx(content: bytes) -> str:
    import openpyxl

    try:
        book = openpyxl.load_workbook(io.BytesIO(content), read_only=True, data_only=True)
    except Exception as exc:  # not a zip, or no workbook part
        raise _unreadable("XLSX", exc) from None
    try:
        return "\n".join(
            "\t".join("" if v is None else str(v) for v in row)
            for sheet in book.worksheets
            for row in sheet.iter_rows(values_only=True)
        )
    finally:
        book.close()


#: media type -> ``bytes -> text``.
EXTRACTORS: dict[str, Callable[[bytes], str]] = {
    "text/plain": _utf8,
    "text/markdown": _utf8,
    "application/json": _utf8,
    "text/csv": _utf8,
    "application/yaml": _utf8,
    "text/html": _html,
    "application/pdf": _pdf,
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": _docx,
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": _xlsx,
}


def extract_text(content: bytes, filename: str, media_type: str) -> str:
    """The text of an upload, by its media type (parameters such as ``; charset=utf-8`` ignored).
    Raises :class:`ExtractionError` (415) for a media type without an extractor."""
    kind = media_type.split(";")[0].strip().lower()
    if kind not in EXTRACTORS:
        raise ExtractionError(f"{filename}: unsupported media type {kind!r} (supported: {sorted(EXTRACTORS)})", 415)
    return EXTRACTORS[kind](content)


_LABELS = re.compile(r"is exactly one of these labels: (.*?)\. The value of", re.S)


def answer_labels(prompt: str) -> list[str]:
    """The answer space the prompt lists (``... one of these labels: "a", "b". The value of ...``);
    ``[]`` when it lists none."""
    m = _LABELS.search(prompt)
    if not m:
        return []
    try:
        labels = json.loads(f"[{m.group(1)}]")
    except json.JSONDecodeError:
        return []
    return [str(x) for x in labels]


def _rule(text: str, prompt: str, seed: int | None) -> str:
    labels = answer_labels(prompt)
    lowered = text.lower()
    longest_first = sorted(labels, key=len, reverse=True)  # "do not refer" holds "refer"
    decision = next((a for a in longest_first if a.lower() in lowered), labels[0] if labels else "")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return json.dumps({"decision": decision, "evidence": [" ".join(first.split()[:12])] if first else []})


_MODEL: dict[str, Any] = {}
_MODEL_LOCK = threading.Lock()
_SCHEMA = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "maxLength": 40},
        "evidence": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 60}},
    },
    "required": ["decision", "evidence"],
    "additionalProperties": False,
}


def _model(text: str, prompt: str, seed: int | None) -> str:
    from metamorph.providers.base import GenerationRequest
    from metamorph.providers.llama_cpp import SMOLLM2_FILE, LlamaCppProvider, gguf_path

    with _MODEL_LOCK:
        if "provider" not in _MODEL:
            _MODEL["provider"] = LlamaCppProvider(model_path=gguf_path(SMOLLM2_FILE), workers=1)
    request = GenerationRequest(
        provider="llama_cpp",
        model=SMOLLM2_FILE,
        messages=(
            {"role": "system", "content": "You answer questions about the document below, from its content only."},
            {"role": "user", "content": f"{prompt}\n\nDocument:\n{text}"},
        ),
        params={
            "temperature": 0.0,
            # room for the longest reply the schema allows to close (10 items of up to 60 characters),
            # as the format study's own limit: a reply cut short is not JSON
            "max_tokens": 512,
            "seed": 0 if seed is None else int(seed),
            "response_format": {"type": "json_object", "schema": _SCHEMA},
        },
    )
    result = _MODEL["provider"].generate(request)
    return result.text or ""


#: ``DOC_SERVICE_ANSWERER`` value -> ``(document text, prompt, seed) -> reply``.
ANSWERERS: dict[str, Callable[[str, str, int | None], str]] = {"rule": _rule, "model": _model}


def answerer_name() -> str:
    """The answerer ``DOC_SERVICE_ANSWERER`` chooses (default ``rule``); raises ``ValueError`` for an unknown one."""
    name = os.environ.get("DOC_SERVICE_ANSWERER", "rule")
    if name not in ANSWERERS:
        raise ValueError(f"DOC_SERVICE_ANSWERER={name!r}: choose one of {sorted(ANSWERERS)}")
    return name


def answer(text: str, prompt: str, seed: int | None) -> str:
    """The reply of the configured answerer (:func:`answerer_name`) to ``prompt`` about ``text``."""
    return ANSWERERS[answerer_name()](text, prompt, seed)


def answer_document(document: Any, prompt: str, seed: int | None) -> str:
    """The pipeline as a function — a ``python`` workflow entry's ``function``: ``document`` has
    ``content`` (bytes), ``filename`` and ``media_type``; returns the reply text."""
    return answer(extract_text(document.content, document.filename, document.media_type), prompt, seed)


def answer_document_with_text(document: Any, prompt: str, seed: int | None) -> dict[str, str]:
    """:func:`answer_document` that also returns the text it extracted — a ``python`` workflow entry
    with ``extracted_pointer: /extracted_text``: ``{"answer": reply, "extracted_text": text}``."""
    text = extract_text(document.content, document.filename, document.media_type)
    return {"answer": answer(text, prompt, seed), "extracted_text": text}
