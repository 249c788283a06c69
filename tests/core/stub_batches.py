"""Provider batch APIs on the local stub server (:mod:`tests.core.stub_http`): OpenAI Batch and
Anthropic Message Batches, stateful, so the real SDKs can submit, poll and download.

OpenAI (:class:`OpenAIBatchAPI`): ``POST /v1/files`` (multipart upload, kept by id), ``POST
/v1/batches``, ``GET /v1/batches/{id}`` (the n-th poll of a batch reports ``statuses[n-1]``, the last
one repeating), ``GET /v1/files/{id}/content``. When a poll first reports a terminal status the
output and error files are built from the uploaded JSONL: each line goes through ``answer(custom_id,
body)``, which returns an output line (:func:`openai_ok`), an error-file line (:func:`openai_http_error`,
:func:`openai_expired`) or ``None`` (no line at all: the request never ran).

Anthropic (:class:`AnthropicBatchAPI`): ``POST /v1/messages/batches``, ``GET
/v1/messages/batches/{id}`` (statuses as above; ``results_url`` once ``ended``), ``GET
/v1/messages/batches/{id}/results`` (JSONL of ``answer(custom_id, params)``: :func:`anthropic_ok`,
:func:`anthropic_errored`, :func:`anthropic_expired`, or ``None``).

Each class counts what it served (``creates``, ``polls``, ``downloads``) and keeps the submitted
lines (``submitted[batch_id]``, parsed JSON) for assertions on what the SDK really sent.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.core.stub_http import Recorded, Reply, StubServer, chat_completion

OPENAI_TERMINAL = {"completed", "failed", "expired", "cancelled"}


def openai_ok(
    text: str, model: str = "gpt-test-2026-01-01", prompt_tokens: int = 7, completion_tokens: int = 2
) -> Callable[[str, dict], dict]:
    """An answer that puts a 200 chat completion ``text`` in the output file."""

    def line(custom_id: str, body: dict) -> dict:
        completion = chat_completion(
            text, model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
        completion["system_fingerprint"] = "fp_batch"
        return {
            "id": f"batch_req_{custom_id[:8]}",
            "custom_id": custom_id,
            "response": {"status_code": 200, "request_id": "req_1", "body": completion},
            "error": None,
        }

    return line


def openai_http_error(status: int, message: str) -> Callable[[str, dict], dict]:
    """An answer that puts an HTTP ``status`` error response in the error file."""

    def line(custom_id: str, body: dict) -> dict:
        return {
            "id": f"batch_req_{custom_id[:8]}",
            "custom_id": custom_id,
            "response": {
                "status_code": status,
                "request_id": "req_2",
                "body": {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}},
            },
            "error": None,
        }

    return line


def openai_expired(custom_id: str, body: dict) -> dict:
    """An error-file line of a request the completion window expired on."""
    return {
        "id": f"batch_req_{custom_id[:8]}",
        "custom_id": custom_id,
        "response": None,
        "error": {
            "code": "batch_expired",
            "message": "This request could not be executed before the completion window expired.",
        },
    }


class OpenAIBatchAPI:
    """The OpenAI Files + Batch endpoints on ``stub`` (see the module docstring).

    Args:
        answer: ``answer(custom_id, body) -> line | None`` for each submitted request.
        statuses: what the 1st, 2nd, ... poll of a batch reports (the last repeats); settable later.
    """

    def __init__(
        self,
        stub: StubServer,
        answer: Callable[[str, dict], dict | None],
        statuses: tuple[str, ...] = ("in_progress", "completed"),
    ):
        self.stub, self.answer, self.statuses = stub, answer, statuses
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.submitted: dict[str, list[dict]] = {}
        self.creates = self.uploads = 0
        self.polls: Counter[str] = Counter()
        self.downloads: Counter[str] = Counter()
        self._lock = threading.Lock()
        stub.route("POST", "/v1/files", self._upload)
        stub.route("POST", "/v1/batches", self._create)
        stub.route("GET", "/v1/batches/[^/]+", self._retrieve)
        stub.route("GET", "/v1/files/[^/]+/content", self._content)

    def _upload(self, rec: Recorded) -> Reply:
        with self._lock:
            self.uploads += 1
            file_id = f"file-in-{self.uploads}"
            self.files[file_id] = rec.parts["file"]["data"]
        return Reply(
            200,
            {
                "id": file_id,
                "object": "file",
                "bytes": len(self.files[file_id]),
                "created_at": 1,
                "filename": rec.parts["file"]["filename"],
                "purpose": rec.parts["purpose"]["data"].decode(),
                "status": "processed",
            },
        )

    def _create(self, rec: Recorded) -> Reply:
        with self._lock:
            self.creates += 1
            batch_id = f"batch_{self.creates}"
            lines = [json.loads(x) for x in self.files[rec.json["input_file_id"]].decode().splitlines() if x.strip()]
            self.submitted[batch_id] = lines
            self.batches[batch_id] = {
                "id": batch_id,
                "object": "batch",
                "endpoint": rec.json["endpoint"],
                "input_file_id": rec.json["input_file_id"],
                "completion_window": rec.json["completion_window"],
                "created_at": 1,
                "status": "validating",
                "output_file_id": None,
                "error_file_id": None,
                "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            }
            return Reply(200, dict(self.batches[batch_id]))

    def _retrieve(self, rec: Recorded) -> Reply:
        batch_id = rec.path.split("?")[0].rsplit("/", 1)[1]
        with self._lock:
            if batch_id not in self.batches:
                return Reply(
                    404,
                    {"error": {"message": f"No batch found with id '{batch_id}'.", "type": "invalid_request_error"}},
                )
            self.polls[batch_id] += 1
            batch = self.batches[batch_id]
            batch["status"] = self.statuses[min(self.polls[batch_id], len(self.statuses)) - 1]
            if (
                batch["status"] in OPENAI_TERMINAL
                and batch["output_file_id"] is None
                and batch["error_file_id"] is None
            ):
                out, err = [], []
                for line in self.submitted[batch_id]:
                    answered = self.answer(line["custom_id"], line["body"])
                    if answered is not None:
                        ok = (answered.get("response") or {}).get("status_code") == 200
                        (out if ok else err).append(answered)
                for kind, lines in (("output", out), ("error", err)):
                    if lines:
                        file_id = f"file-{kind}-{batch_id}"
                        self.files[file_id] = "".join(json.dumps(x) + "\n" for x in lines).encode()
                        batch[f"{kind}_file_id"] = file_id
                batch["request_counts"] = {
                    "total": len(self.submitted[batch_id]),
                    "completed": len(out),
                    "failed": len(err),
                }
            return Reply(200, dict(batch))

    def _content(self, rec: Recorded) -> Reply:
        file_id = rec.path.split("?")[0].split("/")[3]
        with self._lock:
            self.downloads[file_id] += 1
            return Reply(200, raw=self.files[file_id])


def anthropic_ok(text: str, model: str = "claude-test-20260101") -> Callable[[str, dict], dict]:
    """A succeeded result answering ``text``."""

    def line(custom_id: str, params: dict) -> dict:
        return {
            "custom_id": custom_id,
            "result": {
                "type": "succeeded",
                "message": {
                    "id": "msg_b",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 30, "output_tokens": 3},
                },
            },
        }

    return line


def anthropic_errored(error_type: str, message: str) -> Callable[[str, dict], dict]:
    """An errored result (``error_type`` e.g. ``invalid_request_error``)."""

    def line(custom_id: str, params: dict) -> dict:
        return {
            "custom_id": custom_id,
            "result": {
                "type": "errored",
                "error": {"type": "error", "error": {"type": error_type, "message": message}},
            },
        }

    return line


def anthropic_expired(custom_id: str, params: dict) -> dict:
    return {"custom_id": custom_id, "result": {"type": "expired"}}


class AnthropicBatchAPI:
    """The Anthropic Message Batches endpoints on ``stub`` (see the module docstring)."""

    def __init__(
        self,
        stub: StubServer,
        answer: Callable[[str, dict], dict | None],
        statuses: tuple[str, ...] = ("in_progress", "ended"),
    ):
        self.stub, self.answer, self.statuses = stub, answer, statuses
        self.batches: dict[str, dict[str, Any]] = {}
        self.submitted: dict[str, list[dict]] = {}
        self.creates = 0
        self.polls: Counter[str] = Counter()
        self.downloads: Counter[str] = Counter()
        self._lock = threading.Lock()
        stub.route("POST", "/v1/messages/batches", self._create)
        stub.route("GET", "/v1/messages/batches/[^/]+", self._retrieve)
        stub.route("GET", "/v1/messages/batches/[^/]+/results", self._results)

    @staticmethod
    def _object(batch_id: str, status: str, n: int, results_url: str | None) -> dict:
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": {
                "processing": 0 if status == "ended" else n,
                "succeeded": 0,
                "errored": 0,
                "canceled": 0,
                "expired": 0,
            },
            "created_at": "2026-12-01T00:00:00Z",
            "expires_at": "2026-12-02T00:00:00Z",
            "archived_at": None,
            "cancel_initiated_at": None,
            "ended_at": "2026-12-01T01:00:00Z" if status == "ended" else None,
            "results_url": results_url,
        }

    def _create(self, rec: Recorded) -> Reply:
        with self._lock:
            self.creates += 1
            batch_id = f"msgbatch_{self.creates}"
            self.submitted[batch_id] = rec.json["requests"]
            return Reply(200, self._object(batch_id, "in_progress", len(rec.json["requests"]), None))

    def _retrieve(self, rec: Recorded) -> Reply:
        batch_id = rec.path.split("?")[0].rsplit("/", 1)[1]
        with self._lock:
            if batch_id not in self.submitted:
                return Reply(404, {"type": "error", "error": {"type": "not_found_error", "message": "batch not found"}})
            self.polls[batch_id] += 1
            status = self.statuses[min(self.polls[batch_id], len(self.statuses)) - 1]
            url = f"{self.stub.url}/v1/messages/batches/{batch_id}/results" if status == "ended" else None
            return Reply(200, self._object(batch_id, status, len(self.submitted[batch_id]), url))

    def _results(self, rec: Recorded) -> Reply:
        batch_id = rec.path.split("?")[0].split("/")[4]
        with self._lock:
            self.downloads[batch_id] += 1
            lines = [self.answer(r["custom_id"], r["params"]) for r in self.submitted[batch_id]]
        return Reply(200, raw="".join(json.dumps(x) + "\n" for x in lines if x is not None).encode())
