"""Replicates: an independent draw when decoding samples, one computation when it is deterministic.

The studies replicate on purpose: the document-format study's k repeats (MR3 stability, vote;
paper §4.1, §5.5) and format routing's re-runs (§5.5 "Rte."), WorkflowPerturb's three judge calls
per case (App. B.6.5). A replicate is identified by its ``repeat_index`` (1-based) on the
:class:`~metamorph.providers.base.GenerationRequest`; this module decides what the replicate sends
and what it costs.

**A seed per replicate** (:func:`seeded`). When a request samples (:func:`samples`:
``temperature`` absent — the provider's default, which samples — or above 0, and ``top_k`` not 1),
replicate *r* of a request whose base seed is *s* is sent with

    seed = int(sha256("<s>:<r>:<identity>")[:8 hex digits], 16) mod 2³¹

where *identity* is the sha256 of the request's canonical JSON without its seed and
``repeat_index`` (:func:`request_identity`: provider, model, messages, the other parameters,
document). So a rerun reproduces every draw; the replicates of one request get distinct seeds
(two share one with probability 2⁻³¹); and two *different* requests of one replicate index do not
share a random stream. That last point matters: a seeded sampler draws the same uniform numbers
at every token position for every prompt, so one seed per repeat for all formats would make the
formats of an (instance, repeat) group common-random-number draws — correlated, not the
independent executions MR1 compares (measured: SmolLM2 at temperature 0.7 answered ``refer`` to
all 144 construct draws under three shared seeds, and ``do not refer`` 10 times in 108 draws under
nine others). A request without a ``seed`` parameter (a provider that takes none: Anthropic; or a
registry ``seed: null``) stays without one: its replicates are plain independent calls, told apart
by ``repeat_index`` in the cache key. A greedy request (temperature 0) keeps its base seed.

**One computation when decoding is deterministic** (:func:`computation`). A provider declares,
per request, whether its reply is a function of the request alone (``is_deterministic``): the
local llama.cpp provider does for greedy decoding, and for a seeded request (its KV cache is
reset before every call; :func:`llama_cpp_deterministic`, tested on every packaged model); an API
provider only when its registry entry says ``deterministic: true`` (default false: API backends
are not bit-reproducible even at temperature 0 — the reason the paper runs 3 repeats at
temperature 0). The replicates of a deterministic greedy request send the same request but for
``repeat_index``, so they are *one* generation: the request as replicate 1 is called once and
stored once, and every replicate row points to it (its ``generation_key``), with
``shared_generation = True`` on the replicates r > 1 (:func:`is_shared`). Sampled replicates carry
their own seeds, so each is a computation of its own and is called.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from metamorph.providers.base import GenerationRequest, canonical_json, sha256_hex

__all__ = [
    "computation",
    "entry_deterministic",
    "is_shared",
    "llama_cpp_deterministic",
    "provider_deterministic",
    "replicate_seed",
    "request_identity",
    "samples",
    "seeded",
]

_SEED_MOD = 2**31


def samples(params: dict[str, Any]) -> bool:
    """Whether decoding with ``params`` draws from the model's sampling distribution: ``temperature``
    absent (the provider's default samples) or > 0, and ``top_k`` not 1 (top-1 is greedy)."""
    t = params.get("temperature")
    if t is not None and float(t) <= 0:
        return False
    return params.get("top_k") != 1


def request_identity(request: GenerationRequest) -> str:
    """sha256 (hex) of the request's canonical JSON without ``params.seed`` and ``repeat_index``:
    what its replicates have in common."""
    material = request.key_material()
    material["params"] = {k: v for k, v in material["params"].items() if k != "seed"}
    material.pop("repeat_index")
    return sha256_hex(canonical_json(material).encode("utf-8"))


def replicate_seed(base_seed: int, replicate: int, identity: str) -> int:
    """The seed of replicate ``replicate`` (1-based) of the request with :func:`request_identity`
    ``identity`` and base seed ``base_seed``: the first 8 hex digits of
    ``sha256("<base_seed>:<replicate>:<identity>")`` as an integer, mod 2**31. Raises ``ValueError``
    for ``replicate < 1``."""
    if replicate < 1:
        raise ValueError(f"replicate must be >= 1, got {replicate}")
    return int(sha256_hex(f"{int(base_seed)}:{replicate}:{identity}".encode("utf-8"))[:8], 16) % _SEED_MOD


def seeded(request: GenerationRequest) -> GenerationRequest:
    """``request`` as its replicate sends it: when it :func:`samples` and carries a ``seed`` (the
    base seed), that seed becomes :func:`replicate_seed` of it, the request's ``repeat_index`` and
    :func:`request_identity`; otherwise ``request`` unchanged."""
    params = dict(request.params)
    if not samples(params) or params.get("seed") is None:
        return request
    params["seed"] = replicate_seed(params["seed"], request.repeat_index, request_identity(request))
    return dataclasses.replace(request, params=params)


def llama_cpp_deterministic(params: dict[str, Any]) -> bool:
    """Whether the local llama.cpp provider's reply is a function of the request alone: greedy
    decoding, or a seeded request (the provider resets its KV cache before every call, so no
    earlier request shapes the numerics)."""
    return not samples(params) or params.get("seed") is not None


def entry_deterministic(provider_kind: str, declared: bool, request: GenerationRequest) -> bool:
    """What a provider of kind ``provider_kind`` declares for ``request`` without building it (the
    cost plan): ``llama_cpp`` by :func:`llama_cpp_deterministic`, any other kind the registry
    entry's ``deterministic`` (``declared``)."""
    return llama_cpp_deterministic(dict(request.params)) if provider_kind == "llama_cpp" else bool(declared)


def provider_deterministic(provider: Any, request: GenerationRequest) -> bool:
    """``provider.is_deterministic(request)`` when the provider declares it, else False (a
    provider that says nothing is called once per replicate)."""
    declare = getattr(provider, "is_deterministic", None)
    return bool(declare(request)) if callable(declare) else False


def computation(request: GenerationRequest, deterministic: bool) -> GenerationRequest:
    """The request whose one generation serves ``request``: for a deterministic request that does
    not sample (its replicates send the same parameters, base seed included), the same request as
    replicate 1 (``repeat_index`` 1); otherwise ``request`` itself (a sampled replicate carries its
    own seed, so it is a computation of its own even when the provider is deterministic). A
    workflow under test (``http`` / ``python``) takes no decoding parameters: a deterministic one
    is one computation unless it is sent a seed (``seeded: true``), whose replicates differ."""
    if not deterministic or request.repeat_index == 1:
        return request
    if samples(dict(request.params)) and not _unseeded_workflow(request):
        return request
    return dataclasses.replace(request, repeat_index=1)


def _unseeded_workflow(request: GenerationRequest) -> bool:
    """A workflow under test (``http`` / ``python``) sent no seed: it is given no decoding
    parameters, so a deterministic one answers its replicates alike."""
    return request.provider in ("http", "python") and "seed" not in request.params


def is_shared(request: GenerationRequest, deterministic: bool) -> bool:
    """Whether ``request``'s reply is another replicate's generation (:func:`computation` maps it
    to replicate 1)."""
    return computation(request, deterministic) is not request
