"""An asynchronous OpenAI Chat Completions stub (an ASGI app on uvicorn, 127.0.0.1 only).

:mod:`tests.core.stub_http` answers each request on its own thread, which caps it near a few
hundred requests per second; this one answers on one event loop, so it serves thousands per
second and a client measured against it is the bottleneck, not the stub. It answers
``POST /v1/chat/completions`` with :func:`tests.core.stub_http.echo_chat` after ``latency_s``
seconds (``GET /stats`` gives :meth:`AsyncStub.summary`) and records, per request body (:func:`~tests.core.stub_http.body_key`), how many requests
arrived and how many got a 200.

With ``capacity`` set it acts like a rate-limited API: a request arriving while ``capacity``
requests are being served is answered with HTTP 429 and ``Retry-After: retry_after_s`` after
``reject_s`` seconds. Every arrival is recorded in :attr:`AsyncStub.arrivals` as ``(open,
status)``: the requests open at that moment (received, not yet answered: served or being
rejected), this one included, and the status it was given.

``python -m tests.core.stub_async --latency-s 0`` runs it in its own process (benchmarks): it
prints its URL, serves until stdin closes, then prints one JSON line ``{"requests": ...,
"answered": ..., "bodies_requested_twice_or_more": ..., "bodies_answered_twice_or_more": ...}``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import Counter
from typing import Any

import uvicorn

from tests.core.stub_http import Recorded, body_key, echo_chat

PATH = "/v1/chat/completions"


class AsyncStub:
    """The ASGI app. Counters are touched on the server's event loop only.

    Args:
        latency_s: seconds each answered request waits before its reply (``asyncio.sleep``).
        capacity: requests served at once before further arrivals get a 429 (``None``: no limit).
        retry_after_s: the ``Retry-After`` header (seconds) of those 429s.
        reject_s: seconds a 429 takes.
    """

    def __init__(
        self, latency_s: float = 0.0, capacity: int | None = None, retry_after_s: float = 0.0, reject_s: float = 0.0
    ) -> None:
        self.latency_s = latency_s
        self.capacity = capacity
        self.retry_after_s = retry_after_s
        self.reject_s = reject_s
        self.counts: Counter[str] = Counter()  # body key -> requests received
        self.answered: Counter[str] = Counter()  # body key -> 200 replies sent
        self.arrivals: list[tuple[int, int]] = []  # (open at arrival, this one included; status given)
        self.in_flight = 0  # being served
        self.open = 0  # served or being rejected

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks, more = [], True
        while more:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        raw = b"".join(chunks)
        if scope["method"] == "GET" and scope["path"] == "/stats":
            await _reply(send, 200, self.summary())
            return
        if scope["method"] != "POST" or scope["path"] != PATH:
            await _reply(send, 404, {"error": {"message": f"no route for {scope['method']} {scope['path']}"}})
            return
        key = body_key(raw)
        self.counts[key] += 1
        self.open += 1
        try:
            if self.capacity is not None and self.in_flight >= self.capacity:
                self.arrivals.append((self.open, 429))
                if self.reject_s:
                    await asyncio.sleep(self.reject_s)
                await _reply(
                    send,
                    429,
                    {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}},
                    [(b"retry-after", f"{self.retry_after_s:g}".encode())],
                )
                return
            self.in_flight += 1
            self.arrivals.append((self.open, 200))
            try:
                if self.latency_s:
                    await asyncio.sleep(self.latency_s)
                reply = echo_chat(Recorded("POST", PATH, {}, raw, json=json.loads(raw)))
                await _reply(send, 200, reply.body)
                self.answered[key] += 1
            finally:
                self.in_flight -= 1
        finally:
            self.open -= 1

    def summary(self) -> dict[str, int]:
        return {
            "requests": sum(self.counts.values()),
            "answered": sum(self.answered.values()),
            "bodies_requested_twice_or_more": sum(1 for n in self.counts.values() if n > 1),
            "bodies_answered_twice_or_more": sum(1 for n in self.answered.values() if n > 1),
        }


async def _reply(send: Any, status: int, body: Any, headers: list[tuple[bytes, bytes]] = ()) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
            + list(headers),
        }
    )
    await send({"type": "http.response.body", "body": payload})


class StubThread:
    """:class:`AsyncStub` served by uvicorn on a thread of this process (tests); ``url`` has no ``/v1``."""

    def __init__(self, app: AsyncStub) -> None:
        self.app = app
        self._sock = _listen()
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(_config(app))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the async stub did not start")
            threading.Event().wait(0.01)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


def _listen() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    return sock


def _config(app: AsyncStub) -> uvicorn.Config:
    return uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", backlog=4096, timeout_keep_alive=60
    )


def main() -> None:
    """Serve until stdin closes (see the module docstring)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency-s", type=float, default=0.0)
    args = ap.parse_args()
    app = AsyncStub(latency_s=args.latency_s)
    sock = _listen()
    server = uvicorn.Server(_config(app))
    done = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        server.should_exit = True
        done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])
    print(json.dumps(app.summary()), flush=True)


if __name__ == "__main__":
    main()
