"""Which media types each file-ingestion path's provider accepts as a file — one declaration per path.

A path that attaches the document as a file (``openai_file``, ``anthropic_document``) can only
send what the provider documents as a file input; any other document is **not sent** (the study
records the cell as not measurable, :func:`metamorph.measurability.not_sent`, and ``metamorph plan``
says so before any call). ``inline`` (the document's text, or what a named extraction reads back
from a binary file, in the message) and ``upload`` (a workflow under test receives any file) take
every format.

The declarations follow the providers' documentation:

* ``openai_file`` — the Responses API ``input_file`` ("File inputs" guide,
  https://developers.openai.com/api/docs/guides/file-inputs, table "Accepted file types"):
  PDF; text and code (.txt, .md, .json, .html, .xml); rich documents (.doc, .docx, .rtf, .odt);
  presentations (.ppt, .pptx); spreadsheets (.csv, .xls, .xlsx). YAML is not in the documented
  list, so it is not declared.
* ``anthropic_document`` — Messages API ``document`` blocks (Files API guide,
  https://docs.anthropic.com/en/docs/build-with-claude/files, and "PDF support"): a PDF
  (``application/pdf``, sent as a base64 source) or plain text (``text/plain``, a text source).
  A document of another text media type (``text/*``, JSON, YAML, CSV, …: :func:`is_text_media_type`)
  is sent as a plain-text source (its UTF-8 text, media type ``text/plain``); Word and Excel files
  are not text and have no document block.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "FILE_INPUTS",
    "TEXT_MEDIA_TYPES",
    "FileInput",
    "accepts",
    "is_text_media_type",
]

#: Media types (besides ``text/*``) whose bytes are UTF-8 text: sent as a plain-text document source.
TEXT_MEDIA_TYPES = frozenset(
    {
        "application/json",
        "application/ld+json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/x-ndjson",
        "application/jsonl",
        "application/toml",
        "application/csv",
    }
)


def _base(media_type: str) -> str:
    return media_type.split(";", 1)[0].strip().lower()


def is_text_media_type(media_type: str) -> bool:
    """Whether a document of ``media_type`` is UTF-8 text (``text/*``, :data:`TEXT_MEDIA_TYPES`, ``+json``, ``+xml``)."""
    base = _base(media_type)
    return base.startswith("text/") or base in TEXT_MEDIA_TYPES or base.endswith("+json") or base.endswith("+xml")


@dataclass(frozen=True)
class FileInput:
    """What one file-ingestion path sends as a file.

    Attributes:
        path: the ingestion path (:data:`metamorph.providers.base.INGESTION_PATHS`).
        media_types: the media types the provider documents as file inputs of this path.
        text_as_plain: a document of any text media type (:func:`is_text_media_type`) is sent as
            plain text, so it is accepted too.
        source: the documentation the declaration follows (URL).
    """

    path: str
    media_types: frozenset[str]
    text_as_plain: bool
    source: str

    def accepts(self, media_type: str) -> bool:
        """Whether a document of ``media_type`` (parameters such as ``; charset=`` ignored) can be sent."""
        base = _base(media_type)
        return base in self.media_types or (self.text_as_plain and is_text_media_type(base))


#: ingestion path → its declaration; a path not listed (``inline``, ``upload``) takes every format.
FILE_INPUTS: dict[str, FileInput] = {
    "openai_file": FileInput(
        "openai_file",
        frozenset(
            {
                "application/pdf",
                "text/plain",
                "text/markdown",
                "application/json",
                "text/html",
                "application/xml",
                "text/xml",
                "application/msword",
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                "application/rtf",
                "text/rtf",
                "application/vnd.oasis.opendocument.text",
                "application/vnd.ms-powerpoint",
                "application/vnd.openxmlformats-officedocument.presentationml.presentation",
                "text/csv",
                "application/vnd.ms-excel",
                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            }
        ),
        text_as_plain=False,
        source="https://developers.openai.com/api/docs/guides/file-inputs",
    ),
    "anthropic_document": FileInput(
        "anthropic_document",
        frozenset({"application/pdf", "text/plain"}),
        text_as_plain=True,
        source="https://docs.anthropic.com/en/docs/build-with-claude/files",
    ),
}


def accepts(ingestion: str, media_type: str) -> bool:
    """Whether ingestion path ``ingestion`` can send a document of ``media_type`` (:data:`FILE_INPUTS`;
    a path without a declaration takes every media type)."""
    declared = FILE_INPUTS.get(ingestion)
    return declared is None or declared.accepts(media_type)
