"""A user's own Python function as the system under test (registry ``provider: python``).

The entry's ``function`` (``package.module:function``) is called as::

    reply: str = function(document, prompt, seed)

with ``document`` a :class:`~metamorph.providers.base.Document` (``content`` bytes, ``filename``,
``media_type``), ``prompt`` the task prompt (the request's user message) and ``seed`` the
replicate's seed (an ``int``; ``None`` for an entry that is not ``seeded``). It runs in worker
processes like the local models (:class:`metamorph.providers.llama_workers.WorkerPool`: a fresh
``python -P -m`` interpreter per worker over a socket pair, the caller's ``sys.path``), so a
function that loads a model or leaks memory never shares the runner's process, and ``workers``
calls run at once.

An entry that declares ``extracted_pointer`` has a function that returns a JSON-like mapping
instead: the reply is the string its ``reply_pointer`` (default ``/answer``) selects in it, and the
text the workflow extracted from the document the string ``extracted_pointer`` selects (kept as the
result's ``extracted_text``, printed by ``metamorph trace``).

A function that raises, or returns anything but a string (or, with ``extracted_pointer``, a mapping
whose pointers select strings), is a failed call (:class:`~metamorph.providers.base.ProviderError`,
not retried; the exception's type and message are kept), never a reply.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Any

from metamorph.errors import ConfigError
from metamorph.providers.base import GenerationRequest, GenerationResult
from metamorph.providers.http_workflow import read_reply, task_prompt
from metamorph.providers.llama_workers import WorkerPool

__all__ = ["FunctionSpec", "PythonWorkflowProvider", "WorkflowReplyError"]


class WorkflowReplyError(Exception):
    """The function returned something other than text."""


@dataclass(frozen=True)
class FunctionSpec:
    """What a worker process serves: the function ``package.module:function`` of a ``python`` entry
    (picklable; imported in the worker)."""

    function: str
    version: str
    reply_pointer: str = "/answer"
    extracted_pointer: str | None = None

    kind = "python workflow worker"

    @property
    def label(self) -> str:
        return self.function

    def calls(self) -> dict[str, Any]:
        """In the worker: import the function; the call the worker answers (``generate``)."""
        module, name = self.function.split(":")
        fn = getattr(importlib.import_module(module), name)
        version = self.version

        def generate(request: GenerationRequest) -> GenerationResult:
            if request.document is None:
                raise ConfigError("a python workflow is sent a document (ingestion upload); the request has none")
            t0 = time.monotonic()
            reply = fn(request.document, task_prompt(request), request.params.get("seed"))
            latency = time.monotonic() - t0
            extracted = None
            if self.extracted_pointer is not None:
                if not isinstance(reply, dict):
                    raise WorkflowReplyError(
                        f"{self.function} returned {type(reply).__name__}, not a mapping (the entry declares "
                        "extracted_pointer)"
                    )
                reply, extracted = read_reply(reply, self, f"{self.function} returned a mapping whose")
            elif not isinstance(reply, str):
                raise WorkflowReplyError(f"{self.function} returned {type(reply).__name__}, not text")
            return GenerationResult(
                text=reply,
                finish_reason="stop",
                latency_s=latency,
                model_id=self.function,
                model_version=version,
                extracted_text=extracted,
            )

        return {"generate": generate}


class PythonWorkflowProvider:
    """A ``python`` registry entry's function, called in ``workers`` worker processes.

    Args:
        function: ``package.module:function`` (checked importable by the registry).
        version: the entry's ``version`` (reported as each result's ``model_version``).
        workers: worker processes (>= 1), each importing the function once; also ``max_concurrency``.
        deterministic: the registry's declaration (replicates of an unseeded request share one call).
        reply_pointer: the entry's pointer to the reply in the mapping the function returns (used
            when ``extracted_pointer`` is set).
        extracted_pointer: the entry's pointer to the extracted text; set, the function returns a
            mapping both pointers read.

    Raises:
        ConfigError: ``workers < 1``.
    """

    kind = "python"

    def __init__(
        self,
        function: str,
        version: str,
        workers: int = 1,
        deterministic: bool = False,
        reply_pointer: str = "/answer",
        extracted_pointer: str | None = None,
    ):
        self.function = function
        self.max_concurrency = int(workers)
        self.deterministic = bool(deterministic)
        self.pool = WorkerPool(workers, FunctionSpec(function, version, reply_pointer, extracted_pointer))

    def __repr__(self) -> str:
        return f"PythonWorkflowProvider(function={self.function!r}, workers={self.max_concurrency})"

    def is_deterministic(self, request: GenerationRequest) -> bool:
        """The registry's declaration (``deterministic``), the same for every request."""
        return self.deterministic

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """The function's reply, computed by an idle worker.

        Raises:
            ProviderError: the function raised (its type and message kept) or returned no text,
                or the worker died during the call (not retryable).
        """
        return self.pool.call("generate", request)

    def close(self) -> None:
        """Stop the worker processes."""
        self.pool.close()
