"""The example document-QA service: ``POST /ask`` with a multipart upload, JSON reply.

Run it::

    uvicorn examples.doc_service.app:app --host 127.0.0.1 --port 8000

``POST /ask`` (``multipart/form-data``): ``file`` (the document, with its file name and media
type), ``prompt`` (the question) and optional ``seed`` (an integer). The reply is JSON::

    {"answer": "...", "filename": "...", "media_type": "...", "extracted_text": "...",
     "seed": 7, "answerer": "rule"}

Errors, as JSON ``{"error": "..."}``: 400 for a missing field or a seed that is not an integer,
415 for an unsupported media type, 422 for a document its reader cannot open (text that is not
UTF-8, a damaged PDF, DOCX or XLSX).

``DOC_SERVICE_TOKEN`` (optional): when set, a request must carry ``Authorization: Bearer <token>``
(else 401). ``DOC_SERVICE_LOG`` (optional): a file each request is appended to as one JSON line
(file name, media type, sha256, seed) — what the tests compare with ``metamorph plan``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from examples.doc_service.qa import ExtractionError, answer, answerer_name, extract_text

__all__ = ["app"]

_LOG_LOCK = threading.Lock()


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _authorized(request: Request) -> bool:
    token = os.environ.get("DOC_SERVICE_TOKEN")
    if not token:
        return True
    given = request.headers.get("authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def _log(entry: dict) -> None:
    path = os.environ.get("DOC_SERVICE_LOG")
    if path:
        with _LOG_LOCK, open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")


async def ask(request: Request) -> JSONResponse:
    if not _authorized(request):
        return _error(401, "missing or wrong Authorization header")
    async with request.form() as form:
        upload, prompt, seed_text = form.get("file"), form.get("prompt"), form.get("seed")
        if not isinstance(upload, UploadFile):
            return _error(400, "the form has no file field 'file'")
        if not isinstance(prompt, str) or not prompt.strip():
            return _error(400, "the form has no text field 'prompt'")
        content = await upload.read()
        filename = upload.filename or ""
        media_type = upload.content_type or "application/octet-stream"
    seed = None
    if seed_text is not None:
        try:
            seed = int(str(seed_text))
        except ValueError:
            return _error(400, "seed must be an integer")
    _log(
        {
            "filename": filename,
            "media_type": media_type,
            "sha256": hashlib.sha256(content).hexdigest(),
            "seed": seed,
        }
    )
    try:
        text = extract_text(content, filename, media_type)
    except ExtractionError as exc:
        return _error(exc.status, str(exc))
    reply = await run_in_threadpool(answer, text, prompt, seed)
    return JSONResponse(
        {
            "answer": reply,
            "filename": filename,
            "media_type": media_type,
            "extracted_text": text,
            "seed": seed,
            "answerer": answerer_name(),
        }
    )


app = Starlette(routes=[Route("/ask", ask, methods=["POST"])])
