"""How the runner's calls are made: tasks on one event loop (:class:`AsyncCalls`), or spread over
client processes, an event loop each (:class:`ProcessCalls`). Used by :mod:`metamorph.runner`.

Kept apart from the runner (no pandas, no DuckDB import) because each client process imports it:
what a process imports is CPU spent before its first call.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

from metamorph.providers.adaptive import THROTTLE_STATUSES, AdaptiveLimit
from metamorph.providers.base import GenerationRequest, GenerationResult, Provider, ProviderError
from metamorph.providers.retry import RetryPolicy, acall_with_retries
from metamorph.providers.sdk_errors import redact

if TYPE_CHECKING:
    from metamorph.cache import GenerationCache

__all__ = ["AsyncCalls", "ProcessCalls", "Stopped", "drain", "failed", "latency"]


def failed(exc: BaseException) -> GenerationResult:
    """The stored error of a request whose retries ended in ``exc``."""
    if isinstance(exc, ProviderError):
        return GenerationResult(
            text=None, error=f"ProviderError[{exc.status}]: {exc}", attempts=getattr(exc, "attempts", 1)
        )
    return GenerationResult(text=None, error=f"{type(exc).__name__}: {exc}")  # a bug or SDK surprise, never a text


class AsyncCalls:
    """Calls as tasks on one event loop, in one thread for the whole run: each task is one
    :func:`acall_with_retries` of the provider's ``async_session`` generate, holding a slot of an
    :class:`~metamorph.providers.adaptive.AdaptiveLimit` of ``provider.max_concurrency`` (a 429 /
    503 / 529 lowers how many requests are in flight, successes raise it back). Each result is
    handed to ``store`` (the cache's ``put``; ``None`` in a client process, whose parent stores)."""

    def __init__(
        self,
        provider: Provider,
        retry: RetryPolicy,
        store: Callable[[GenerationRequest, GenerationResult], None] | None,
    ) -> None:
        self.provider, self.retry, self.store = provider, retry, store
        self.done: SimpleQueue[tuple[str, GenerationResult | None]] = SimpleQueue()
        self.limit: AdaptiveLimit | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), name="metamorph-calls", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop, self._closing = asyncio.Event(), asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        try:
            async with self.provider.async_session() as agenerate:  # type: ignore[attr-defined]
                self._agenerate = agenerate
                self.limit = AdaptiveLimit(max(1, self.provider.max_concurrency))
                self._ready.set()
                await self._closing.wait()
                while self._tasks:
                    await asyncio.gather(*self._tasks, return_exceptions=True)
        except BaseException as exc:
            if not self._ready.is_set():
                self._error = exc
                self._ready.set()
                return
            raise

    def submit(self, items: list[tuple[str, GenerationRequest]]) -> None:
        self.loop.call_soon_threadsafe(self._spawn, items)

    def _spawn(self, items: list[tuple[str, GenerationRequest]]) -> None:
        for key, req in items:
            task = self.loop.create_task(self._one(key, req))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def finished(self, timeout: float) -> list[tuple[str, GenerationResult | None]]:
        """As :meth:`metamorph.runner._ThreadCalls.finished`.

        Raises:
            RuntimeError: the event loop ended while calls were still owed (a bug: its error was
                printed by the thread), rather than waiting for them for ever.
        """
        got = drain(self.done, timeout)
        if not got and not self._thread.is_alive():
            raise RuntimeError("the runner's event loop ended before its calls finished")
        return got

    def close(self, interrupted: bool) -> None:
        """Let the calls in flight finish (``interrupted``: start no attempt, end the waits between
        attempts), close the provider's session and end the thread."""
        if self._thread.is_alive():
            if interrupted:
                self.loop.call_soon_threadsafe(self._stop.set)
            self.loop.call_soon_threadsafe(self._closing.set)
        self._thread.join()

    async def _one(self, key: str, req: GenerationRequest) -> None:
        limit = self.limit
        assert limit is not None
        res, held = None, False

        async def attempt() -> GenerationResult:
            if self._stop.is_set():
                raise Stopped
            started = limit.round
            try:
                out = await self._agenerate(req)
            except ProviderError as err:
                if err.status in THROTTLE_STATUSES:
                    limit.throttled(started, err.retry_after)
                raise
            limit.succeeded()
            return out

        async def pause(seconds: float) -> None:  # the wait before a retry; ends at once on an interrupt
            nonlocal held
            give_up = limit.over()  # a throttle lowered the limit below the slots held: wait without one
            if give_up:
                limit.release()
                held = False
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=seconds)
            except TimeoutError:
                if give_up:
                    await limit.acquire(priority=True)
                    held = True
                return
            raise Stopped

        try:
            t0 = time.monotonic()
            await limit.acquire()
            held = True
            try:
                res, attempts = await acall_with_retries(attempt, self.retry, sleep=pause)
                res = res.replace(attempts=attempts, latency_s=latency(res, t0))
            except Stopped:  # interrupted: nothing is stored, the key stays a miss
                return
            except Exception as exc:
                res = failed(exc)
            if self.store is not None:
                self.store(req, res)
        finally:
            if held:
                limit.release()
            self.done.put((key, res))


class ProcessCalls:
    """Calls from ``n`` client processes (``python -m metamorph.client_calls``), each an
    :class:`AsyncCalls` with its share of ``provider.max_concurrency`` (:func:`_client_process`).
    Requests go to the process with the fewest outstanding; each result comes back over a pipe and
    is stored here, in the one process that writes the cache, by a reader thread per process.

    A process is started afresh (not forked: this process runs threads, the cache writer's and
    Dagster's) and imports only this module and the provider's: not the caller's ``__main__``, as
    ``multiprocessing``'s spawn would (a Dagster command line, seconds of imports). The provider
    reaches it pickled over its pipe (``__reduce__``: the API key travels there only, never to a
    file, argument, log or error)."""

    def __init__(self, provider: Provider, retry: RetryPolicy, cache: GenerationCache, n: int) -> None:
        self.cache = cache
        self.done: SimpleQueue[tuple[str, GenerationResult | None]] = SimpleQueue()
        self.reqs: dict[str, GenerationRequest] = {}
        self.procs: list[subprocess.Popen] = []
        self.inboxes: list[Any] = []
        self.readers: list[threading.Thread] = []
        self.outstanding = [0] * n
        self.ended: list[str | None] = [None] * n  # why a process's results ended ("closed": as asked)
        self._lock = threading.Lock()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        concurrency = max(1, provider.max_concurrency)
        try:
            for i in range(n):
                share = concurrency // n + (i < concurrency % n)
                in_r, in_w = multiprocessing.Pipe(duplex=False)
                out_r, out_w = multiprocessing.Pipe(duplex=False)
                fds = (in_r.fileno(), out_w.fileno())
                try:
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "metamorph.client_calls", *map(str, fds)],
                        pass_fds=fds,
                        env=env,
                        stdin=subprocess.DEVNULL,
                    )
                finally:
                    in_r.close()
                    out_w.close()  # only the child holds its end: its exit is an end of file here
                self.procs.append(proc)
                self.inboxes.append(in_w)
                in_w.send(("start", (provider, retry, share)))
                reader = threading.Thread(target=self._read, args=(i, out_r), name=f"metamorph-client-{i + 1} results")
                self.readers.append(reader)
                reader.start()
        except BaseException:
            self.close(interrupted=True)
            raise

    def _read(self, i: int, conn: Any) -> None:
        why = "its results ended without a reason (the process died)"
        try:
            while True:
                kind, body = conn.recv()
                if kind == "done":
                    for key, res in body:
                        req = self.reqs.pop(key)
                        if res is not None:
                            self.cache.put(req, res)
                        self.done.put((key, res))
                    with self._lock:
                        self.outstanding[i] -= len(body)
                elif kind == "closed":
                    why = "closed"
                    return
                else:  # "failed": the process's own error, the API key redacted
                    why = body
                    return
        except (EOFError, OSError):
            pass
        finally:
            conn.close()
            self.ended[i] = why

    def submit(self, items: list[tuple[str, GenerationRequest]]) -> None:
        live = [i for i, why in enumerate(self.ended) if why is None]
        groups: dict[int, list[tuple[str, GenerationRequest]]] = {i: [] for i in live}
        with self._lock:
            for key, req in items:
                i = min(live, key=lambda j: self.outstanding[j])
                groups[i].append((key, req))
                self.outstanding[i] += 1
                self.reqs[key] = req
        for i, group in groups.items():
            if group:
                try:
                    self.inboxes[i].send(("submit", group))
                except OSError:  # the process is gone: finished() says so
                    pass

    def finished(self, timeout: float) -> list[tuple[str, GenerationResult | None]]:
        """As :meth:`metamorph.runner._ThreadCalls.finished`.

        Raises:
            RuntimeError: a client process ended before it was asked to (killed, or an error in
                it); the results it returned are stored, its calls in flight are not (they stay
                misses, retried by the next run).
        """
        for i, why in enumerate(self.ended):
            if why is not None and why != "closed":
                try:
                    code = self.procs[i].wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    code = None
                raise RuntimeError(
                    f"client process {i + 1} of {len(self.procs)} ended (exit code {code}): {why}; "
                    f"{self.outstanding[i]} of its calls were not returned (nothing stored for them)"
                )
        return drain(self.done, timeout)

    def close(self, interrupted: bool) -> None:
        """Ask every process to finish its calls in flight (``interrupted``: start no attempt, end the
        waits between attempts) and return them; store them; end the processes (terminated if one
        has not exited 10 s after its last result)."""
        for box in self.inboxes:
            try:
                box.send(("close", interrupted))
            except OSError:
                pass
        for reader in self.readers:
            reader.join()
        for proc in self.procs:
            for end, wait in ((None, 10.0), (proc.terminate, 5.0), (proc.kill, None)):
                if end is not None:
                    end()
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        for box in self.inboxes:
            box.close()


def _client_process(inbox: Any, outbox: Any) -> None:
    """The body of a client process: ``("start", (provider, retry, share))`` from ``inbox`` opens
    an :class:`AsyncCalls` of ``share`` calls in flight on ``provider``; ``("submit", [(key,
    request), ...])`` starts calls, their ``(key, result)`` go to ``outbox`` as ``("done", [...])``
    as they finish; ``("close", interrupted)`` ends the calls as :meth:`AsyncCalls.close` does,
    then ``("closed", None)``. An error is sent as ``("failed", message)`` (the API key
    redacted). The end of ``inbox`` (the parent is gone) stops the calls and ends the process.
    SIGINT is ignored: a terminal's Ctrl-C reaches the whole process group, and the parent decides
    (it asks for the calls in flight, then ends the process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    closing: list[bool] = []
    secret = None

    def read() -> None:
        try:
            while True:
                kind, body = inbox.recv()
                if kind == "submit":
                    calls.submit(body)
                else:
                    closing.append(bool(body))
                    return
        except (EOFError, OSError):
            closing.append(True)

    try:
        _, (provider, retry, share) = inbox.recv()
        secret = getattr(provider, "_api_key", None)
        provider.max_concurrency = share
        calls = AsyncCalls(provider, retry, None)
    except BaseException as exc:
        _send(outbox, ("failed", redact(f"{type(exc).__name__}: {exc}", secret)))
        return
    threading.Thread(target=read, name="metamorph-client requests", daemon=True).start()
    try:
        while not closing:
            got = calls.finished(0.01)
            if got:
                outbox.send(("done", got))
        calls.close(interrupted=closing[0])
        outbox.send(("done", drain(calls.done, 0.0)))
        outbox.send(("closed", None))
    except BaseException as exc:
        calls.close(interrupted=True)
        _send(outbox, ("failed", redact(f"{type(exc).__name__}: {exc}", secret)))


def _send(conn: Any, message: tuple) -> None:
    """``conn.send(message)``, unless the other end is gone."""
    try:
        conn.send(message)
    except OSError:
        pass


def latency(res: GenerationResult, t0: float) -> float:
    return res.latency_s if res.latency_s is not None else time.monotonic() - t0


def drain(done: SimpleQueue, timeout: float) -> list:
    """What ``done`` holds, waiting up to ``timeout`` seconds for the first item ([] if none came)."""
    try:
        items = [done.get(timeout=timeout)]
    except Empty:
        return []
    while True:
        try:
            items.append(done.get_nowait())
        except Empty:
            return items


class Stopped(BaseException):
    """Raised in a worker's wait between retries once the run is interrupted (caught in the worker)."""


if __name__ == "__main__":  # a client process of ProcessCalls: the two pipe descriptors it was given
    from multiprocessing.connection import Connection

    _client_process(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
