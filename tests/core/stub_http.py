"""A real local HTTP server standing in for provider APIs (the boundary we cannot reach).

It records every request (method, path, headers, JSON or multipart body) and replies from
per-route scripts; the real openai / anthropic SDKs are pointed at it with ``base_url``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import default as email_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    json: Any = None
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)  # multipart: name -> {filename, content_type, data}


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


class StubServer:
    """Records requests; replies from per-route scripts (the last reply of a script repeats)."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._scripts: dict[tuple[str, str], list[Reply]] = {}
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

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)
        self._thread.start()

    def script(self, method: str, path: str, *replies: Reply) -> None:
        self._scripts[(method, path)] = list(replies)

    def requests_to(self, path: str, method: str = "POST") -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path.split("?")[0] == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in h.headers.items()}
        rec = Recorded(method=h.command, path=h.path, headers=headers, raw=raw)
        ctype = headers.get("content-type", "")
        if ctype.startswith("application/json") and raw:
            rec.json = json.loads(raw)
        elif ctype.startswith("multipart/form-data"):
            msg = BytesParser(policy=email_policy).parsebytes(
                b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + raw)
            for part in msg.iter_parts():
                rec.parts[part.get_param("name", header="content-disposition")] = {
                    "filename": part.get_filename(),
                    "content_type": part.get_content_type(),
                    "data": part.get_payload(decode=True),
                }
        with self._lock:
            self.requests.append(rec)
            script = self._scripts.get((h.command, h.path.split("?")[0]))
            if script:
                reply = script.pop(0) if len(script) > 1 else script[0]
            else:
                reply = Reply(404, {"error": {"message": f"no script for {h.command} {h.path}"}})
        if reply.delay_s:
            time.sleep(reply.delay_s)
        payload = json.dumps(reply.body).encode()
        try:
            h.send_response(reply.status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(payload)))
            for k, v in reply.headers.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout test)
            pass
