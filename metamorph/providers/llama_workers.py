"""N llama.cpp contexts in N worker processes, so N local requests are computed at once.

Every local model is computed here, ``n = 1`` included: a worker loads one model for its whole
life, so no process ever holds two models or two llama.cpp builds
(:mod:`metamorph.providers.llama_cpp` says why that matters). A llama.cpp context is not
thread-safe and one single-threaded context keeps one core busy, so :class:`LlamaWorkerPool`
starts ``n`` worker processes, each owning one
:class:`~metamorph.providers.llama_cpp.LlamaCppProvider` (one context, ``n_threads`` threads, the
KV cache holding nothing a completion depends on between calls). A worker is a fresh interpreter,
``python -P -m metamorph.providers.llama_workers``: no state inherited from a threaded parent, the
caller's ``sys.path`` (not the working directory's packages), and, unlike ``multiprocessing``'s
spawn, the caller's main module is not re-imported (a script needs no ``__main__`` guard). A call
is sent to an idle worker over its socket and the calling thread waits for the result, so the
runner's threads (``max_concurrency`` = ``n``) are the only scheduler: cache claims, progress,
interrupts and crash-resume stay the runner's.

Every worker computes a request through the provider's single-context path (same library, same
thread count, no state carried between calls), so a completion is byte-identical whichever
worker computes it and whatever the other workers compute meanwhile (tested on the packaged
models: ``tests/core/test_llama_workers.py``).

Signals and failures:

* workers ignore SIGINT: Ctrl-C reaches the whole process group, and the runner's answer to it
  is to let the calls in flight finish and store them; a worker stopping mid-call would lose them.
* a worker whose parent dies sees its socket close and exits (no orphaned model processes).
* a worker that dies mid-call (killed, out of memory) fails that call with
  :class:`~metamorph.providers.base.ProviderError` (not retryable) and is replaced by a new
  worker, so the rest of the run goes on with ``n`` workers.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from metamorph.errors import ConfigError, ContextBudgetError
from metamorph.providers.base import GenerationRequest, GenerationResult, ProviderError

__all__ = [
    "LlamaWorkerPool",
    "WorkerPool",
    "WorkerSpec",
    "in_worker",
    "usable_cores",
]

#: exception types a worker's call may raise that are re-raised as themselves in the caller.
_REraised: dict[str, type[Exception]] = {"ConfigError": ConfigError, "ContextBudgetError": ContextBudgetError}


def usable_cores() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where the
    platform has no affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class WorkerSpec:
    """What each worker process builds its :class:`LlamaCppProvider` from (picklable)."""

    model_path: str
    n_ctx: int
    n_threads: int
    chat_format: str | None
    engine: str | None = None
    vocab_only: bool = False

    @property
    def label(self) -> str:
        """The worker's name in messages and in its command line (the model file)."""
        return Path(self.model_path).name

    #: What the pool's messages call its workers.
    kind = "llama.cpp worker"

    def calls(self) -> dict[str, Any]:
        """In the worker: load the model; the calls the worker answers (``generate``,
        ``prompt_tokens``, ``count_tokens``)."""
        from metamorph.providers.llama_cpp import LlamaCppProvider

        provider = LlamaCppProvider(
            model_path=self.model_path,
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            chat_format=self.chat_format,
            workers=1,
            engine=self.engine,
            vocab_only=self.vocab_only,
        )
        return {
            "generate": provider.generate,
            "prompt_tokens": provider.prompt_tokens,
            "count_tokens": provider.count_tokens,
        }


_IN_WORKER = False


def in_worker() -> bool:
    """Whether this process is a worker of a :class:`LlamaWorkerPool` (its provider then computes
    in this process; it never starts workers of its own)."""
    return _IN_WORKER


def _worker_main(spec: Any, conn: Any) -> None:
    """A worker process: build what ``spec`` serves (``spec.calls()``: for a :class:`WorkerSpec`
    the model, answering ``("generate", request)``, ``("prompt_tokens", messages)`` and
    ``("count_tokens", text)``), then answer each message with ``("ok", value)`` or ``("error",
    type name, message)`` until the socket closes."""
    global _IN_WORKER
    _IN_WORKER = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    calls = spec.calls()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent closed the socket or died
            return
        if msg is None:
            return
        kind, payload = msg
        try:
            reply: tuple = ("ok", calls[kind](payload))
        except Exception as exc:  # sent back and raised in the caller's thread
            reply = ("error", type(exc).__name__, str(exc))
        conn.send(reply)


class _Worker:
    """One worker process and the parent's end of its socket (pickled messages,
    :class:`multiprocessing.connection.Connection`)."""

    def __init__(self, spec: Any):
        parent, child = socket.socketpair()
        # the child imports this package as the caller does: the caller's sys.path, in order, and
        # nothing before it (-P: not the working directory, whose own metamorph/ would win)
        path = os.pathsep.join(p or os.getcwd() for p in sys.path)  # "" is the caller's working directory
        env = {**os.environ, "PYTHONPATH": path}
        cmd = [sys.executable, "-P", "-m", __name__, str(child.fileno()), spec.label]
        self.process = subprocess.Popen(cmd, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, env=env)
        child.close()
        self.conn = Connection(parent.detach())
        self.conn.send(spec)

    def call(self, kind: str, payload: Any) -> tuple:
        self.conn.send((kind, payload))
        return self.conn.recv()

    def exitcode(self) -> int | None:
        """The process's exit code (negative: the signal that ended it); None while it runs."""
        return self.process.poll()

    def stop(self, timeout: float = 5.0) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)
        self.conn.close()


class WorkerPool:
    """``n`` worker processes, each serving the calls ``spec.calls()`` builds in it (picklable
    ``spec`` with a ``label`` and a ``kind`` for messages): a local model (:class:`LlamaWorkerPool`)
    or a workflow's Python function (:mod:`metamorph.providers.python_workflow`). Started on the
    first call; :meth:`call` is thread-safe and blocks while all ``n`` workers are busy.

    Raises:
        ConfigError: ``n < 1``.
    """

    def __init__(self, n: int, spec: Any):
        if n < 1:
            raise ConfigError(f"a {spec.kind} pool needs at least 1 worker, got {n}")
        self.n = n
        self.spec = spec
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False

    def _start(self) -> None:
        with self._lock:
            if self._closed:
                raise ConfigError(f"the {self.spec.kind} pool of {self.spec.label} is closed")
            if not self._all:
                for _ in range(self.n):
                    w = _Worker(self.spec)
                    self._all.append(w)
                    self._idle.put(w)

    def call(self, kind: str, payload: Any) -> Any:
        """``kind``'s call of ``payload`` computed by an idle worker.

        Raises:
            ConfigError, ContextBudgetError: as the worker's call raised them.
            ProviderError: the worker died during the call (it is replaced; not retryable), or
                any other exception of the worker's call (type and message kept).
        """
        return self._call(kind, payload)

    def _call(self, kind: str, payload: Any) -> Any:
        self._start()
        w = self._idle.get()
        try:
            reply = w.call(kind, payload)
        except (EOFError, OSError) as exc:
            code = w.exitcode()
            self._replace(w)
            raise ProviderError(
                f"{self.spec.kind} process died during the call (exit code {code}): {type(exc).__name__}"
            ) from None
        self._idle.put(w)
        if reply[0] == "ok":
            return reply[1]
        _, name, message = reply
        if name in _REraised:
            raise _REraised[name](message)
        raise ProviderError(f"{name} in {self.spec.kind}: {message}")

    def _replace(self, dead: _Worker) -> None:
        dead.stop(timeout=1.0)
        with self._lock:
            self._all.remove(dead)
            if self._closed:
                return
            w = _Worker(self.spec)
            self._all.append(w)
        self._idle.put(w)

    def pids(self) -> list[int]:
        """Process ids of the running workers (empty before the first call)."""
        with self._lock:
            return [w.process.pid for w in self._all]

    def close(self) -> None:
        """Stop every worker (each finishes the call it is computing first, up to 5 s)."""
        with self._lock:
            self._closed = True
            workers, self._all = self._all, []
        for w in workers:
            w.stop()


class LlamaWorkerPool(WorkerPool):
    """``n`` worker processes, each owning one single-context :class:`LlamaCppProvider`.

    Args:
        n: worker processes (>= 1); started on the first :meth:`generate`, each loading the model.
        model_path: as :class:`LlamaCppProvider` (per worker).
        n_ctx: as :class:`LlamaCppProvider` (per worker).
        n_threads: as :class:`LlamaCppProvider` (per worker).
        chat_format: as :class:`LlamaCppProvider` (per worker).
        engine: as :class:`LlamaCppProvider` (per worker).
        vocab_only: as :class:`LlamaCppProvider` (per worker): the workers only count tokens.

    :meth:`generate` is thread-safe and blocks while all ``n`` workers are busy; callers run at
    most ``n`` calls at once to keep every worker busy and none waiting.
    """

    def __init__(
        self,
        n: int,
        model_path: str | Path,
        n_ctx: int,
        n_threads: int,
        chat_format: str | None,
        engine: str | None = None,
        vocab_only: bool = False,
    ):
        super().__init__(n, WorkerSpec(str(model_path), n_ctx, n_threads, chat_format, engine, vocab_only))

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """The request's completion, computed by an idle worker.

        Raises:
            ConfigError, ContextBudgetError: as :meth:`LlamaCppProvider.generate` raised them in the worker.
            ProviderError: the worker died during the call (it is replaced; not retryable), or
                any other exception of the worker's call (type and message kept).
        """
        return self._call("generate", request)

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """:meth:`LlamaCppProvider.prompt_tokens` computed by an idle worker (errors as :meth:`generate`)."""
        return self._call("prompt_tokens", [dict(m) for m in messages])

    def count_tokens(self, text: str) -> int:
        """:meth:`LlamaCppProvider.count_tokens` computed by an idle worker (errors as :meth:`generate`)."""
        return self._call("count_tokens", text)


def _child_main(fd: int) -> None:
    """A worker process's entry point (``python -m metamorph.providers.llama_workers FD MODEL``):
    read the :class:`WorkerSpec` from the socket ``FD``, then serve it (:func:`_worker_main`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    try:
        spec = conn.recv()
    except (EOFError, OSError):
        return
    _worker_main(spec, conn)


if __name__ == "__main__":  # run as a script: serve from the package's own module, whose flags the provider reads
    from metamorph.providers import llama_workers

    llama_workers._child_main(int(sys.argv[1]))
