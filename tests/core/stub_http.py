"""A real local HTTP server standing in for provider APIs (the boundary we cannot reach).

It records every request (method, path, headers, JSON or multipart body) and replies from
per-route scripts; the real openai / anthropic SDKs are pointed at it with ``base_url``. It
listens on 127.0.0.1 only and is started and stopped by the tests (the ``stub`` fixture).

Beyond scripted replies it can:

* answer every request after ``latency_s`` seconds (a provider's think time);
* inject faults (:class:`FaultPlan`): 429 with ``Retry-After``, 500, 529 overloaded, a connection
  reset, a timeout, a 200 whose body is an error object, a truncated JSON body, a body that is
  not JSON, and a connection closed half way through the body (:data:`FAULT_KINDS`);
* count requests per request body (:func:`body_key`, the sha256 of the canonical JSON body: one
  body = one cache key for a given provider and endpoint), so a test can see duplicates.

``python -m tests.core.stub_http --latency-s 0.2`` runs it in its own process (benchmarks): it
prints its URL, answers every chat completion with :func:`echo_chat`, and prints the request
count and the number of bodies requested more than once when stdin closes.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import default as email_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Faults :class:`FaultPlan` can inject, in the order it assigns them.
FAULT_KINDS = ("429", "500", "529", "reset", "timeout", "error_body", "truncated", "malformed", "cut")


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    json: Any = None
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)  # multipart: name -> {filename, content_type, data}
    key: str = ""  # body_key(raw)
    fault: str | None = None  # the fault injected into the reply, if any
    replied: bool = False  # a complete, well-formed HTTP reply was written (faulty bodies included)


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: bytes | None = None  # sent as is instead of json.dumps(body)
    drop: str | None = None  # "reset" | "hang" | "cut": misbehave at the connection level


#: A route's reply: fixed, or computed from the recorded request.
Responder = Reply | Callable[[Recorded], Reply]


def body_key(raw: bytes) -> str:
    """sha256 (hex) of a request body: of its canonical JSON (sorted keys) when it is JSON, else of the bytes."""
    try:
        raw = json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()
    except ValueError:
        pass
    return hashlib.sha256(raw).hexdigest()


def chat_completion(text: str, model: str = "gpt-x", prompt_tokens: int = 5, completion_tokens: int = 1) -> dict:
    """An OpenAI Chat Completions response body answering ``text``."""
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def echo_chat(rec: Recorded) -> Reply:
    """A Chat Completions reply ``"echo: <last message content>"`` for the requested model."""
    body = rec.json or {}
    last = (body.get("messages") or [{"content": ""}])[-1]["content"]
    return Reply(200, chat_completion(f"echo: {last}", model=body.get("model", "gpt-x")))


@dataclass(frozen=True)
class FaultPlan:
    """Which requests fail, and how; deterministic in the request body.

    A body is faulted when ``int(body_key[:8], 16) % 10_000 < rate * 10_000`` (so ``rate`` of all
    distinct bodies, independent of arrival order); its fault kind is ``kinds[h // 10_000 %
    len(kinds)]``. Only its first ``times`` requests are faulted (``None``: every request), so
    retries of a transient fault succeed; kinds in ``persistent`` fault every request of their
    bodies (they end as errors).

    Attributes:
        retry_after_s: the ``Retry-After`` header of a 429 (seconds).
        hang_s: how long a ``timeout`` fault holds the request before closing it without a reply
            (make it longer than the client's timeout).
    """

    rate: float
    kinds: tuple[str, ...] = FAULT_KINDS
    times: int | None = 1
    persistent: tuple[str, ...] = ()
    retry_after_s: float = 0.0
    hang_s: float = 1.0

    def __post_init__(self) -> None:
        unknown = (set(self.kinds) | set(self.persistent)) - set(FAULT_KINDS)
        if unknown or not self.kinds or not 0.0 <= self.rate <= 1.0:
            raise ValueError(
                f"FaultPlan: rate must be in [0, 1] and kinds among {FAULT_KINDS}, "
                f"got rate={self.rate!r}, kinds={self.kinds!r}"
            )

    def kind_for(self, key: str) -> str | None:
        """The fault kind for the body ``key`` (``None``: never faulted), ignoring ``times``."""
        h = int(key[:8], 16)
        if h % 10_000 >= self.rate * 10_000:
            return None
        return self.kinds[h // 10_000 % len(self.kinds)]

    def fault_of(self, key: str, nth: int) -> str | None:
        """The fault injected into the ``nth`` request (1-based) of the body ``key``, or ``None``."""
        kind = self.kind_for(key)
        if kind is None or (kind not in self.persistent and self.times is not None and nth > self.times):
            return None
        return kind

    def reply(self, kind: str, ok: Reply) -> Reply:
        """The faulty reply of kind ``kind``; ``ok`` is the reply the request would have had."""
        good = ok.raw if ok.raw is not None else json.dumps(ok.body).encode()
        if kind == "429":
            return Reply(
                429,
                {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}},
                {"retry-after": f"{self.retry_after_s:g}"},
            )
        if kind == "500":
            return Reply(500, {"error": {"message": "The server had an error", "type": "server_error"}})
        if kind == "529":
            return Reply(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        if kind == "error_body":
            return Reply(
                200,
                {
                    "error": {
                        "message": "The server had an error processing your request",
                        "type": "server_error",
                        "code": None,
                    }
                },
            )
        if kind == "truncated":
            return Reply(200, raw=good[: len(good) // 2])
        if kind == "malformed":
            return Reply(200, raw=b"<html><body>502 Bad Gateway</body></html>")
        if kind == "cut":
            return Reply(200, raw=good, drop="cut")
        return Reply(drop={"reset": "reset", "timeout": "hang"}[kind], delay_s=self.hang_s if kind == "timeout" else 0)


class StubServer:
    """Records requests; replies from per-route scripts (the last reply of a script repeats).

    Args:
        latency_s: seconds every reply waits before it is sent (on top of a reply's ``delay_s``).
        faults: a :class:`FaultPlan` applied to every request (``None``: no faults); settable later.
    """

    def __init__(self, latency_s: float = 0.0, faults: FaultPlan | None = None) -> None:
        self.requests: list[Recorded] = []
        self.latency_s = latency_s
        self.faults = faults
        self.counts: Counter[str] = Counter()  # body_key -> requests received
        self._scripts: dict[tuple[str, str], list[Responder]] = {}
        self._routes: list[tuple[str, re.Pattern[str], Responder]] = []  # (method, path regex, responder)
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:
                stub._handle(self)

            def do_POST(self) -> None:
                stub._handle(self)

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # many concurrent clients connect at once
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                import sys

                if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):  # a killed client is no error
                    super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def script(self, method: str, path: str, *replies: Responder) -> None:
        self._scripts[(method, path)] = list(replies)

    def route(self, method: str, pattern: str, responder: Responder) -> None:
        """Answer ``method`` requests whose path (without query) fully matches the regex ``pattern``
        (e.g. ``/v1/batches/[^/]+``) with ``responder``; exact :meth:`script` routes win."""
        self._routes.append((method, re.compile(pattern), responder))

    def requests_to(self, path: str, method: str = "POST") -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path.split("?")[0] == path]

    def count_by(self, label: Callable[[Recorded], Any], path: str | None = None) -> Counter:
        """Requests received per ``label(request)`` (e.g. the last message's content), optionally for one path."""
        with self._lock:
            recs = list(self.requests)
        return Counter(label(r) for r in recs if path is None or r.path.split("?")[0] == path)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in h.headers.items()}
        rec = Recorded(method=h.command, path=h.path, headers=headers, raw=raw, key=body_key(raw))
        ctype = headers.get("content-type", "")
        if ctype.startswith("application/json") and raw:
            rec.json = json.loads(raw)
        elif ctype.startswith("multipart/form-data"):
            msg = BytesParser(policy=email_policy).parsebytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + raw)
            for part in msg.iter_parts():
                rec.parts[part.get_param("name", header="content-disposition")] = {
                    "filename": part.get_filename(),
                    "content_type": part.get_content_type(),
                    "data": part.get_payload(decode=True),
                }
        with self._lock:
            self.requests.append(rec)
            self.counts[rec.key] += 1
            nth = self.counts[rec.key]
            script = self._scripts.get((h.command, h.path.split("?")[0]))
            routed = [r for m, rx, r in self._routes if m == h.command and rx.fullmatch(h.path.split("?")[0])]
            if script:
                reply = script.pop(0) if len(script) > 1 else script[0]
            elif routed:
                reply = routed[0]
            else:
                reply = Reply(404, {"error": {"message": f"no script for {h.command} {h.path}"}})
            plan = self.faults
        if callable(reply):
            reply = reply(rec)
        if plan is not None:
            rec.fault = plan.fault_of(rec.key, nth)
            if rec.fault is not None:
                reply = plan.reply(rec.fault, reply)
        if reply.delay_s or self.latency_s:
            time.sleep(reply.delay_s + self.latency_s)
        try:
            rec.replied = self._send(h, reply)
        except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout test)
            pass

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, reply: Reply) -> bool:
        """Write ``reply``; ``True`` when a complete HTTP response went out."""
        if reply.drop in ("reset", "hang"):  # no reply at all; "reset" sends a TCP RST
            h.close_connection = True
            if reply.drop == "reset":
                h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                h.connection.close()
            return False
        payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
        h.send_response(reply.status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        for k, v in reply.headers.items():
            h.send_header(k, v)
        h.end_headers()
        if reply.drop == "cut":  # half the promised body, then the connection closes
            h.wfile.write(payload[: len(payload) // 2])
            h.wfile.flush()
            h.close_connection = True  # the server closes the socket after this handler returns
            return False
        h.wfile.write(payload)
        h.wfile.flush()
        return True


def main() -> None:
    """Serve :func:`echo_chat` on ``/v1/chat/completions`` until stdin closes (see the module docstring)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency-s", type=float, default=0.2)
    args = ap.parse_args()
    stub = StubServer(latency_s=args.latency_s)
    stub.script("POST", "/v1/chat/completions", echo_chat)
    print(stub.url, flush=True)
    sys.stdin.read()
    stub.close()
    print(
        json.dumps(
            {
                "requests": sum(stub.counts.values()),
                "bodies_requested_twice_or_more": sum(1 for n in stub.counts.values() if n > 1),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
