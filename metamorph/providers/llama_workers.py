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
is sent to an idle worker over its socket and the calling thread waits for the result; cache
claims, progress, interrupts and crash-resume stay the runner's. The pool only chooses the
worker: a local model's call goes to a worker that computed the same prompt lately (its KV states
hold the prompt but its last token, :mod:`metamorph.providers.llama_cpp`), waiting up to
:data:`STEAL_AFTER_S` for it while another idle worker takes a call of another prompt, so a
study's repeats of one prompt are prefilled once rather than once per worker. With ``n > 1``
the provider lets the runner keep ``2n`` calls in flight (``max_concurrency``), so an idle worker
has other prompts to take.

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
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Hashable
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


#: calls each worker remembers the affinity of (a local model's: its prompt), when the pool
#: chooses which worker computes a call: a prompt asked again goes to the worker whose KV states
#: (the last ``PREFIX_STATES`` segments, :mod:`metamorph.providers.llama_cpp`) likely hold it.
AFFINITY_KEPT = 8

#: seconds a call waits for the busy worker that holds its affinity before another idle worker
#: computes it (from the start: the prompt's segments computed again there).
STEAL_AFTER_S = 0.5


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
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a worker became idle, or a call arrived
        self._idle: list[_Worker] = []  # longest idle first
        self._all: list[_Worker] = []
        #: worker -> the affinity keys of its last AFFINITY_KEPT calls (the one in flight included)
        self._recent: dict[_Worker, list[Hashable]] = {}
        self._waiting: list[Hashable | None] = []  # the affinity of each call waiting for a worker
        self._closed = False

    def _start(self) -> None:
        with self._lock:
            if self._closed:
                raise ConfigError(f"the {self.spec.kind} pool of {self.spec.label} is closed")
            if not self._all:
                for _ in range(self.n):
                    w = _Worker(self.spec)
                    self._all.append(w)
                    self._idle.append(w)

    def _holders(self, affinity: Hashable) -> list[_Worker]:
        """The workers among whose last :data:`AFFINITY_KEPT` calls one had ``affinity``."""
        return [w for w in self._all if affinity in self._recent.get(w, ())]

    def _acquire(self, affinity: Hashable | None) -> _Worker:
        """An idle worker for a call of ``affinity`` (waits while none is idle).

        Without an affinity: the longest idle. With one: an idle worker that computed a call of
        the same affinity lately; while every such worker is busy, the call waits for one, or
        takes another idle worker after :data:`STEAL_AFTER_S`; a call no worker holds, or one
        that waited that long, takes only an idle worker no other waiting call holds (that call
        takes it). Only the worker is chosen here: a completion is the same whichever worker
        computes it."""
        with self._changed:
            arrived = time.monotonic()
            self._waiting.append(affinity)
            try:
                while True:
                    if self._closed:
                        raise ConfigError(f"the {self.spec.kind} pool of {self.spec.label} is closed")
                    w = self._choose(affinity, time.monotonic() - arrived >= STEAL_AFTER_S)
                    if w is not None:
                        break
                    self._changed.wait(STEAL_AFTER_S if self._idle else None)
            finally:
                self._waiting.remove(affinity)
                self._changed.notify_all()  # a worker it wanted may now suit another waiting call
            self._idle.remove(w)
            if affinity is not None:
                keys = self._recent.setdefault(w, [])
                if affinity in keys:
                    keys.remove(affinity)
                keys.append(affinity)
                del keys[:-AFFINITY_KEPT]
            return w

    def _choose(self, affinity: Hashable | None, steal: bool) -> _Worker | None:
        if not self._idle:
            return None
        if affinity is None:
            return self._idle[0]
        holders = self._holders(affinity)
        mine = [w for w in self._idle if w in holders]
        if mine:
            return mine[0]
        if holders and not steal:
            return None  # its holder is busy: wait for it a while
        # an idle worker no other waiting call would rather have (those calls take the others)
        wanted = {w for a in self._waiting if a is not None and a != affinity for w in self._holders(a)}
        free = [w for w in self._idle if w not in wanted]
        return free[0] if free else None

    def _release(self, w: _Worker) -> None:
        with self._changed:
            if w in self._all:
                self._idle.append(w)
            self._changed.notify_all()

    def call(self, kind: str, payload: Any) -> Any:
        """``kind``'s call of ``payload`` computed by an idle worker.

        Raises:
            ConfigError, ContextBudgetError: as the worker's call raised them.
            ProviderError: the worker died during the call (it is replaced; not retryable), or
                any other exception of the worker's call (type and message kept).
        """
        return self._call(kind, payload)

    def _call(self, kind: str, payload: Any, affinity: Hashable | None = None) -> Any:
        self._start()
        w = self._acquire(affinity)
        try:
            reply = w.call(kind, payload)
        except (EOFError, OSError) as exc:
            code = w.exitcode()
            self._replace(w)
            raise ProviderError(
                f"{self.spec.kind} process died during the call (exit code {code}): {type(exc).__name__}"
            ) from None
        self._release(w)
        if reply[0] == "ok":
            return reply[1]
        _, name, message = reply
        if name in _REraised:
            raise _REraised[name](message)
        raise ProviderError(f"{name} in {self.spec.kind}: {message}")

    def _replace(self, dead: _Worker) -> None:
        dead.stop(timeout=1.0)
        with self._changed:
            self._all.remove(dead)
            self._recent.pop(dead, None)
            if self._closed:
                return
            w = _Worker(self.spec)
            self._all.append(w)
            self._idle.append(w)
            self._changed.notify_all()

    def pids(self) -> list[int]:
        """Process ids of the running workers (empty before the first call)."""
        with self._lock:
            return [w.process.pid for w in self._all]

    def close(self) -> None:
        """Stop every worker (each finishes the call it is computing first, up to 5 s)."""
        with self._changed:
            self._closed = True
            workers, self._all = self._all, []
            self._idle.clear()
            self._changed.notify_all()
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
        return self._call("generate", request, affinity=hash(tuple(tuple(sorted(m.items())) for m in request.messages)))

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
