"""The document-QA pipeline of the example service: extract the upload's text, then answer.

Extraction (:data:`EXTRACTORS`) is chosen by the upload's media type: one function per type,
``bytes -> text``. The four text formats of the document-format study (``text/plain``,
``text/markdown``, ``application/json``, ``text/csv``) are decoded as UTF-8; a binary format
(PDF, DOCX, XLSX) plugs in as one more entry of :data:`EXTRACTORS` with its reader.

Answering (:data:`ANSWERERS`, chosen by ``DOC_SERVICE_ANSWERER``):

* ``rule`` (default): no model. The decision is the longest label of the question's answer space
  that occurs in the document (case-insensitive), else the first label; the evidence is the
  document's first non-empty line, cut to 12 words. Deterministic and instant: the tests' choice.
* ``model``: the packaged SmolLM2 (``SmolLM2-135M-Instruct.Q4_1.gguf``) through metamorph's
  ``llama_cpp`` provider (a worker process), greedy, decoding constrained to the JSON answer shape;
  the seed is passed on.

Errors: an unsupported media type or a document that is not UTF-8 raises :class:`ExtractionError`
(the service answers HTTP 415 / 422).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from typing import Any

__all__ = [
    "ANSWERERS",
    "EXTRACTORS",
    "ExtractionError",
    "answer",
    "answer_document",
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


#: media type -> ``bytes -> text``.
EXTRACTORS: dict[str, Callable[[bytes], str]] = {
    "text/plain": _utf8,
    "text/markdown": _utf8,
    "application/json": _utf8,
    "text/csv": _utf8,
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
            "max_tokens": 256,
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
