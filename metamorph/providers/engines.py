"""The engines that run a local GGUF model, and the identity each puts into a request's cache key.

Two engines compute ``llama_cpp`` registry entries (the registry's ``params.engine``):

* ``xllamacpp`` (the default): PyPI ``xllamacpp``, a prebuilt wheel embedding llama.cpp's server
  (:class:`xllamacpp.Server`, called in the worker's process, no HTTP; one slot, its prompt cache
  holding nothing but a prompt's leading segments when a prompt arrives);
* ``llama-cpp-python``: PyPI ``llama-cpp-python``, built from source (``scripts/bootstrap.sh``
  builds it for the test suite; the fallback where no xllamacpp wheel installs).

The two are different llama.cpp versions with different JSON-schema-to-grammar converters, so the
same request gets a different completion from each (measured: docs/benchmarks.md). A completion
is therefore keyed by the engine *and its installed version* (:func:`engine_identity`, part of
:meth:`metamorph.providers.base.GenerationRequest.key_material` for ``llama_cpp`` requests and of
the registry fingerprint of ``llama_cpp`` entries): upgrading an engine re-computes instead of
serving the old engine's completions as the new one's, and the registry sensor re-evaluates the
entry. No import of either engine happens here (only package metadata is read).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import metadata

from metamorph.errors import ConfigError

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "PREFILL",
    "SETTINGS",
    "engine_identity",
    "engine_key",
    "engine_name",
    "local_params",
]

#: engine name -> the PyPI distribution that provides it.
ENGINES: dict[str, str] = {"xllamacpp": "xllamacpp", "llama-cpp-python": "llama-cpp-python"}

#: the engine of a ``llama_cpp`` entry without ``params.engine``.
DEFAULT_ENGINE = "xllamacpp"

#: the version bootstrap installs, for the error that says how to install an engine.
_PINS = {"xllamacpp": "xllamacpp==2026.10.11549", "llama-cpp-python": "llama-cpp-python==0.3.36"}


def engine_name(params: dict) -> str:
    """The engine a ``llama_cpp`` request or entry names (``params['engine']``), else
    :data:`DEFAULT_ENGINE`.

    Raises:
        ConfigError: the name is not one of :data:`ENGINES`.
    """
    name = params.get("engine") or DEFAULT_ENGINE
    if name not in ENGINES:
        raise ConfigError(f"unknown local engine {name!r:.40}; known: {', '.join(ENGINES)}")
    return name


@lru_cache(maxsize=None)
def engine_identity(name: str) -> str:
    """``"<engine> <installed version>"``, e.g. ``"xllamacpp 2026.10.11549"``.

    Raises:
        ConfigError: unknown engine, or its package is not installed (the line says what to install).
    """
    if name not in ENGINES:
        raise ConfigError(f"unknown local engine {name!r:.40}; known: {', '.join(ENGINES)}")
    try:
        return f"{name} {metadata.version(ENGINES[name])}"
    except metadata.PackageNotFoundError:
        hint = "bash scripts/bootstrap.sh --dev" if name == "llama-cpp-python" else "bash scripts/bootstrap.sh"
        raise ConfigError(
            f"the local engine {name} is not installed (pip install {_PINS[name]}; {hint} does it)"
        ) from None


#: engine name -> how it evaluates a prompt, where that is not one batch of the whole prompt: both
#: engines evaluate the system prompt, the next two paragraphs and the rest but the last token each
#: as a batch of its own, then the last token (:mod:`metamorph.providers.llama_cpp` says why); a different floating-point
#: computation from one batch, hence part of the cache key.
PREFILL: dict[str, str] = {
    "llama-cpp-python": "system prompt, 2 paragraphs, rest, last token",
    "xllamacpp": "system prompt, 2 paragraphs, rest, last token",
}


#: engine name -> a setting of the engine that changes its completions of some models, in every key:
#: xllamacpp keeps the KV cells of sliding-window layers (Gemma 3's) for the whole context, as the
#: prompt cache of its segmented prefill needs (a sliding-window cache is another floating-point
#: computation: measured on Gemma 3 270M, the same replies with log-probabilities up to 0.1 apart).
SETTINGS: dict[str, str] = {"xllamacpp": "full-size SWA cache"}


def engine_key(name: str, split: bool = True) -> str:
    """What a ``llama_cpp`` request's cache key and an entry's fingerprint say about the engine:
    :func:`engine_identity`, then ``"; <SETTINGS[name]>"`` for an engine listed in
    :data:`SETTINGS`, then ``"; prefill <PREFILL[name]>"`` for an engine listed in :data:`PREFILL`
    when ``split`` (the request starts with a system message, so its prompt may be evaluated in
    segments; a request without one is evaluated as one batch). Raises what
    :func:`engine_identity` raises."""
    parts = [engine_identity(name)]
    if name in SETTINGS:
        parts.append(SETTINGS[name])
    if split and name in PREFILL:
        parts.append(f"prefill {PREFILL[name]}")
    return "; ".join(parts)


def local_params(params: dict) -> dict:
    """``params`` of a ``llama_cpp`` request or entry as its cache key and fingerprint hold them:
    without ``engine`` (the key's own ``engine`` field names it, with its version) and without
    ``prefix_reuse`` (a completion is the same with it on or off), so writing either out changes
    no key."""
    return {k: v for k, v in params.items() if k not in ("engine", "prefix_reuse")}
