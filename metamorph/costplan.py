"""Cost planning and the budget guard: what a run's model calls will be, before any is made.

A :class:`CostPlan` is computed from the exact requests a generation asset is about to send
(the study's own ``plan`` module builds them) and the generation cache:

* ``requests``: rows the asset will hold; ``cache_hits``: those the cache already serves (a
  stored success for the request's key, :meth:`metamorph.cache.GenerationCache.get_many`),
  counted per row like :class:`metamorph.runner.RunStats`; ``reused``: in a whole study's plan,
  those an earlier step of the same run calls itself (the routed request in a format equals that
  format's request of the first step), so the cache serves them when the step runs — not cache
  hits now, and not calls of this step; ``calls``: the distinct keys left to call (duplicates are
  called once) — what :func:`metamorph.runner.run_requests` will call;
* ``input_tokens`` of those calls: for a local ``llama_cpp`` model **counted** with the model's
  own tokenizer on the exact chat-formatted prompt, by the entry's engine (a token-counting
  provider, about 1 s to load, or the provider already loaded), with BOS as the engine adds it
  (what the call's ``prompt_tokens`` reports); for an API model **estimated**
  as ceil(characters / 4) of the message text, plus the attached document's bytes / 4
  (:data:`CHARS_PER_TOKEN`; real tokenizers differ — about 3–5 characters per token for English,
  fewer for CJK text or digits). :attr:`CostPlan.token_method` says which;
* ``output_tokens``: the sum of each call's ``max_tokens`` — an **upper bound** (a reply may stop
  earlier); a call without ``max_tokens`` is counted in ``unbounded_calls`` and adds nothing;
* ``cost_usd``: input and output tokens at the registry entry's ``price_per_mtok`` (USD per million
  tokens, :class:`metamorph.models.Price`); 0 for a local model; ``None`` when an API model has
  no price (the cost is unknown).

:func:`check_budget` raises :class:`~metamorph.errors.BudgetError` when the cost exceeds a budget
(or is unknown while a budget is set and calls remain). :func:`plan_study` enumerates a whole
study's requests from its sources as the run would, for ``metamorph plan`` (:data:`COMMANDS`),
through the study's own ``plan.cost_steps`` (:class:`PlanStep`). Some calls depend on outcomes:
the document-format study's format routing re-runs every input in the best format, which is known
only after the first generations; its part of the plan is the largest it can be over every
choice of best format ("up to"). WorkflowPerturb's LLM generator retries a reply that fails
validation, falls back to one step at a time for description changes and may escalate to other
models: its first attempts are exact, the rest is planned as every call it can make, each retry
carrying replies of ``max_tokens`` tokens ("up to"; the WorkflowPerturb study's plan module says how).

Planning streams: a step's requests are produced one instance at a time (a :class:`PlanStep`
may hold a function that yields its groups), keyed, looked up in the cache :data:`PLAN_CHUNK` at a
time and counted, and then dropped; what is kept is each distinct key (to count a call once and
to see an earlier step's keys as cached) and running totals — never the rendered requests, which
held about 58 KB per MedQA row (docs/benchmarks.md has the figures).

No Dagster here: the assets call :func:`plan_requests` and :func:`check_budget`.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metamorph.errors import BudgetError, ConfigError, ContextBudgetError, MetamorphError
from metamorph.models import ModelSpec, Price, check_study_kinds, load_registry
from metamorph.providers.base import GenerationRequest
from metamorph.providers.llama_cpp import local_gguf
from metamorph.replicates import computation, entry_deterministic, is_shared
from metamorph.suites import SUITES_GROUP, suite_hook

__all__ = [
    "CHARS_PER_TOKEN",
    "COMMANDS",
    "CostPlan",
    "METHOD_ESTIMATE",
    "METHOD_TOKENIZER",
    "OUTPUT_NOTE",
    "PLAN_CHUNK",
    "SUITES_GROUP",
    "PlanStep",
    "REPO_ROOT",
    "add_arguments",
    "budget_steps",
    "cached_keys",
    "check_budget",
    "check_budget_sum",
    "check_max_tokens",
    "computation_keys",
    "default_cache",
    "default_registry",
    "estimate_tokens",
    "plan_calls",
    "plan_requests",
    "plan_steps",
    "plan_study",
    "run",
    "token_counter",
    "total",
    "usd",
]

#: Characters per token of the estimate used for API models (their tokenizers are not local).
CHARS_PER_TOKEN = 4
METHOD_TOKENIZER = "counted: the model's tokenizer on the chat-formatted prompt (llama.cpp)"
METHOD_ESTIMATE = f"estimated: ceil(characters / {CHARS_PER_TOKEN}) of the message text (+ attached document bytes)"
OUTPUT_NOTE = "output tokens = the sum of max_tokens over the calls (an upper bound)"

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Requests keyed and looked up in the cache at a time while a plan streams (one cache query each).
PLAN_CHUNK = 1024


def usd(amount: float) -> str:
    """``$1.35``, ``$0.000052``, ``$0``: up to 6 decimals, trailing zeros dropped (``$5e-07`` below that)."""
    text = f"{amount:.6f}".rstrip("0").rstrip(".")
    return f"${text}" if text not in ("0", "-0") or amount == 0 else f"${amount:.1g}"


@dataclass(frozen=True)
class CostPlan:
    """The plan of one generation step of one model (see the module docstring for each count).

    ``upper_bound``: the step's requests depend on outcomes not known yet, and the counts are the
    most they can be (format routing). ``label`` names the step (e.g. ``workflow_generations``).
    """

    model_id: str
    provider: str
    requests: int
    cache_hits: int
    calls: int
    input_tokens: int
    output_tokens: int
    token_method: str
    price: Price | None
    unbounded_calls: int = 0
    upper_bound: bool = False
    label: str = ""
    #: requests served by another replicate's deterministic computation (:mod:`metamorph.replicates`)
    shared: int = 0
    #: requests an earlier step of the same run calls itself (served by the cache when this step runs)
    reused: int = 0
    #: the earlier step(s) making the ``reused`` calls, e.g. ``workflow_generations``
    reused_from: str = ""

    @property
    def local(self) -> bool:
        return self.provider == "llama_cpp"

    @property
    def cost_usd(self) -> float | None:
        """USD of the calls: 0 for a local model or no calls, ``None`` for an unpriced API model."""
        if self.local or self.calls == 0:
            return 0.0
        if self.price is None:
            return None
        return self.price.cost_usd(self.input_tokens, self.output_tokens, self.calls)

    @property
    def method_short(self) -> str:
        """How the input tokens were obtained, in two words (the full text: ``token_method``)."""
        return (
            "counted, model tokenizer"
            if self.token_method == METHOD_TOKENIZER
            else f"estimated, chars/{CHARS_PER_TOKEN}"
        )

    @property
    def workflow(self) -> bool:
        """The calls go to a workflow under test (an ``http`` or ``python`` entry): priced per call,
        no decoding parameters, so no output-token bound."""
        return self.provider in ("http", "python")

    @property
    def price_key(self) -> str:
        """The registry key that prices this plan's calls: ``price_per_call`` for a workflow under test."""
        return "price_per_call" if self.workflow else "price_per_mtok"

    def cost_text(self) -> str:
        c = self.cost_usd
        if c is None:
            return f"unknown (no {self.price_key} in the registry)"
        return usd(c) + (" (local model)" if self.local else "")

    def line(self) -> str:
        """One line, e.g. ``gpt-x order_generations: 24 requests, 0 cache hits, 24 calls, 3,120
        input tokens (estimated, chars/4), ≤ 768 output tokens (max_tokens), est. cost $0.0046``;
        with requests an earlier step of the run calls, ``…, 0 cache hits, 2 reuse a call of this
        run's workflow_generations, up to 6 calls, …``."""
        up = "up to " if self.upper_bound else ""
        head = f"{self.model_id} {self.label}".strip()
        unb = f", {self.unbounded_calls} calls without max_tokens (output not bounded)" if self.unbounded_calls else ""
        shared = f" ({self.shared} of them replicates sharing a deterministic computation)" if self.shared else ""
        reused = f", {self.reused} reuse a call of this run's {self.reused_from}" if self.reused else ""
        if self.workflow:
            output = "output not counted (a workflow takes no max_tokens)"
        else:
            output = f"≤ {self.output_tokens:,} output tokens (max_tokens){unb}"
        return (
            f"{head}: {up}{self.requests} requests{shared}, {self.cache_hits} cache hits{reused}, {up}{self.calls} calls, "
            f"{up}{self.input_tokens:,} input tokens ({self.method_short}), {output}, est. cost {up}{self.cost_text()}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The plan as JSON-able values (the generation asset's ``cost_plan`` metadata)."""
        return {
            "requests": self.requests,
            "shared_replicates": self.shared,
            "cache_hits": self.cache_hits,
            "reused_in_run": self.reused,
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "input_token_method": self.token_method,
            "output_tokens_max": self.output_tokens,
            "output_token_note": OUTPUT_NOTE,
            "unbounded_calls": self.unbounded_calls,
            "price_per_mtok_usd": None
            if self.price is None
            else {"input": self.price.input, "output": self.price.output},
            "est_cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
            "upper_bound": self.upper_bound,
        }


def estimate_tokens(request: GenerationRequest) -> int:
    """ceil(characters / :data:`CHARS_PER_TOKEN`) of every message's content, plus the attached
    document's bytes / :data:`CHARS_PER_TOKEN` (rounded up): the estimate for API models."""
    chars = sum(len(str(m.get("content") or "")) for m in request.messages)
    if request.document is not None:
        chars += len(request.document.content)
    return math.ceil(chars / CHARS_PER_TOKEN)


def check_max_tokens(spec: ModelSpec, max_tokens: int | None, n_ctx: int) -> None:
    """Refuse a completion budget that leaves a local model no room for any prompt: ``max_tokens``
    (``--max-tokens``) of ``n_ctx`` or more, the context window that prompt and completion share.
    Every call would otherwise fail before decoding and be stored as an error, and the run would
    report ⊥ for every reply. ``None`` (the study's own budget) and API models are not checked
    (an API states no context window here).

    Raises:
        ContextBudgetError: ``spec`` is ``llama_cpp`` and ``max_tokens >= n_ctx``.
    """
    if spec.provider == "llama_cpp" and max_tokens is not None and max_tokens >= n_ctx:
        raise ContextBudgetError(
            f"--max-tokens {max_tokens:,} leaves no room for a prompt: model {spec.id!r} has a context of "
            f"n_ctx={n_ctx:,} tokens for prompt and completion together (give less than {n_ctx:,})"
        )


def token_counter(spec: ModelSpec, provider: Any = None) -> tuple[Callable[[GenerationRequest], int], str]:
    """``(count(request) -> prompt tokens, method)`` for ``spec``.

    A ``llama_cpp`` entry is counted exactly: with ``provider``'s ``request_prompt_tokens`` when
    given (the provider the run uses), else with a token-counting provider of the entry's engine
    (``vocab_only``: llama-cpp-python loads no weights, xllamacpp loads the model without computing).
    Any other provider: :func:`estimate_tokens`. Raises :class:`ConfigError` when the GGUF is missing.
    """
    if spec.provider != "llama_cpp":
        return estimate_tokens, METHOD_ESTIMATE
    if provider is None or not hasattr(provider, "request_prompt_tokens"):
        from metamorph.providers.llama_cpp import LlamaCppProvider

        provider = LlamaCppProvider(
            model_path=local_gguf(spec), chat_format=spec.chat_format, vocab_only=True, engine=spec.params.get("engine")
        )
    return provider.request_prompt_tokens, METHOD_TOKENIZER


def computation_keys(requests: Sequence[GenerationRequest], spec: ModelSpec) -> list[str]:
    """The cache key each request is served under for ``spec``: its own, or that of the
    deterministic computation its replicates share (:func:`metamorph.replicates.computation`) —
    the keys :func:`metamorph.runner.run_requests` looks up."""
    return [computation(r, entry_deterministic(spec.provider, spec.deterministic, r)).cache_key() for r in requests]


def plan_requests(
    requests: Iterable[GenerationRequest],
    spec: ModelSpec,
    cached: Iterable[str] = (),
    *,
    count: Callable[[GenerationRequest], int] | None = None,
    method: str | None = None,
    label: str = "",
    upper_bound: bool = False,
    lookup: Callable[[list[str]], Iterable[str]] | None = None,
    seen: set[str] | None = None,
    earlier: Mapping[str, str] | None = None,
) -> CostPlan:
    """The :class:`CostPlan` of sending ``requests`` for ``spec``, streamed: ``requests`` may be
    any iterable (a generator is consumed once, :data:`PLAN_CHUNK` requests at a time, and no
    request is kept once it is counted).

    ``cached``: the cache keys already served (e.g. ``cache.get_many(keys)``'s keys, plus keys an
    earlier step of the same run will store). ``lookup``: called with each chunk's keys that are
    not in ``cached``, returns those the cache serves (one query per chunk; ``None``: no cache).
    ``count``/``method``: the prompt-token counter (default :func:`token_counter` of ``spec``; it
    is only called for the calls to make, so a run served wholly from the cache loads no tokenizer).
    ``seen``: a set that receives every key of ``requests``. ``earlier``: the keys an earlier step of
    the same run calls (key → that step's label): a request with one that the cache does not serve
    now is counted in ``reused`` (the cache serves it when this step runs), not as a cache hit nor
    a call.
    """
    cached = cached if isinstance(cached, (set, frozenset)) else set(cached)
    earlier = earlier or {}
    n = shared = hits = reused = input_tokens = output_tokens = unbounded = 0
    todo: set[str] = set()
    reused_from: set[str] = set()
    it = iter(requests)
    while chunk := list(itertools.islice(it, PLAN_CHUNK)):
        keys = computation_keys(chunk, spec)
        unknown = [k for k in keys if k not in cached]
        stored = set(lookup(unknown)) if lookup is not None and unknown else set()
        for k, r in zip(keys, chunk):
            n += 1
            shared += is_shared(r, entry_deterministic(spec.provider, spec.deterministic, r))
            if k in cached or k in stored:
                hits += 1
            elif k in earlier:
                reused += 1
                reused_from.add(earlier[k])
            elif k not in todo:
                todo.add(k)
                if count is None:
                    count, method = token_counter(spec)
                input_tokens += count(r)
                m = r.params.get("max_tokens")
                output_tokens += int(m) if m else 0
                unbounded += not m
        if seen is not None:
            seen.update(keys)
        del chunk, keys, unknown, stored
    method = method or (METHOD_TOKENIZER if spec.provider == "llama_cpp" else METHOD_ESTIMATE)
    return CostPlan(
        model_id=spec.id,
        provider=spec.provider,
        requests=n,
        cache_hits=hits,
        calls=len(todo),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        token_method=method,
        price=spec.price,
        unbounded_calls=0 if spec.workflow else unbounded,  # a workflow takes no max_tokens
        upper_bound=upper_bound,
        label=label,
        shared=shared,
        reused=reused,
        reused_from=", ".join(sorted(reused_from)),
    )


def cached_keys(
    cache: Any, requests: Sequence[GenerationRequest], spec: ModelSpec, stale_before: Any = None
) -> set[str]:
    """Keys of ``requests`` (:func:`computation_keys` for ``spec``) the cache serves (``cache``: a
    :class:`~metamorph.cache.GenerationCache` or ``None`` for none; ``stale_before`` as in
    :func:`metamorph.runner.run_requests`)."""
    if cache is None:
        return set()
    return set(cache.get_many(computation_keys(requests, spec), stale_before=stale_before))


def total(plans: Sequence[CostPlan]) -> CostPlan:
    """The plans of one model added up (``upper_bound`` if any part is; cost unknown if any is)."""
    first = plans[0]
    return CostPlan(
        model_id=first.model_id,
        provider=first.provider,
        requests=sum(p.requests for p in plans),
        cache_hits=sum(p.cache_hits for p in plans),
        calls=sum(p.calls for p in plans),
        input_tokens=sum(p.input_tokens for p in plans),
        output_tokens=sum(p.output_tokens for p in plans),
        token_method=first.token_method,
        price=first.price,
        unbounded_calls=sum(p.unbounded_calls for p in plans),
        upper_bound=any(p.upper_bound for p in plans),
        label="total",
        shared=sum(p.shared for p in plans),
        reused=sum(p.reused for p in plans),
        reused_from=", ".join(sorted({f for p in plans for f in p.reused_from.split(", ") if f})),
    )


def check_budget(plan: CostPlan, budget_usd: float | None, outcome: str = "nothing was called") -> None:
    """Raise :class:`BudgetError` (one line, ending in ``outcome``) when ``budget_usd`` is set and the
    plan's cost exceeds it, or is unknown (an API model without ``price_per_mtok``) while calls
    remain. ``None``: no budget."""
    if budget_usd is None:
        return
    cost = plan.cost_usd
    step = f" ({plan.label})" if plan.label else ""
    if cost is None:
        raise BudgetError(
            f"model {plan.model_id!r}{step}: {plan.calls} calls to make but the registry entry has no "
            f"{plan.price_key}, so the budget of {usd(budget_usd)} cannot be checked; {outcome}"
        )
    if cost > budget_usd:
        tokens = "" if plan.workflow else f", {plan.input_tokens:,} input + ≤ {plan.output_tokens:,} output tokens"
        raise BudgetError(
            f"model {plan.model_id!r}{step}: {plan.calls} calls{tokens}, est. cost {usd(cost)} exceeds the budget of "
            f"{usd(budget_usd)}; {outcome}"
        )


def check_budget_sum(plans: Sequence[CostPlan], budget_usd: float | None, outcome: str = "nothing was called") -> None:
    """Raise :class:`BudgetError` when ``budget_usd`` is set and the plans of one step for several
    models (a generator and its escalation models) cost more than it together, or one of them with
    calls left has an unknown cost. Each plan alone: :func:`check_budget`. ``None``: no budget."""
    if budget_usd is None or len(plans) < 2:
        return
    unknown = [p.model_id for p in plans if p.cost_usd is None]
    if unknown:
        raise BudgetError(
            f"models {unknown}: calls to make but no price_per_mtok in the registry, so the budget of "
            f"{usd(budget_usd)} cannot be checked; {outcome}"
        )
    cost = sum(p.cost_usd or 0.0 for p in plans)
    if cost > budget_usd:
        parts = ", ".join(f"{p.model_id} {usd(p.cost_usd or 0.0)}" for p in plans)
        raise BudgetError(
            f"models {[p.model_id for p in plans]} ({plans[0].label}): est. cost {usd(cost)} together "
            f"({parts}) exceeds the budget of {usd(budget_usd)}; {outcome}"
        )


# ------------------------------------------------------------------------------------------
# Whole studies, for `metamorph plan`


#: A part of a :class:`PlanStep`: its alternatives, each an iterable of requests.
Group = tuple[Iterable[GenerationRequest], ...]


@dataclass(frozen=True)
class PlanStep:
    """One generation step of a study's run, as its ``plan.cost_steps`` gives it.

    ``label``: the generation asset (e.g. ``order_generations``). ``groups``: independent parts of
    the step, each a tuple of *alternatives* (request iterables). A step known in advance is one
    group with one alternative; a step whose requests depend on outcomes (which format turns out
    best) lists every possible outcome of each part, and is planned as the largest (``upper_bound``).
    A step sees the keys of the exact steps before it as made by the run (they are stored by then:
    ``reused`` in its plan, unless the cache holds them already).

    ``groups`` is either the groups themselves (a tuple) or, to stream, a function that returns
    an iterator of them whose alternatives are generators (:meth:`streamed`): the requests are then
    made while they are planned and never held together. ``outcomes``: whether the step depends on
    outcomes (``upper_bound``); needed with a function, which cannot be looked into without
    running it.
    """

    label: str
    groups: tuple[Group, ...] | Callable[[], Iterable[Group]]
    outcomes: bool | None = None

    @classmethod
    def exact(cls, label: str, requests: Iterable[GenerationRequest]) -> "PlanStep":
        return cls(label, ((tuple(requests),),))

    @classmethod
    def streamed(cls, label: str, groups: Callable[[], Iterable[Group]], *, outcomes: bool = False) -> "PlanStep":
        """A step whose groups ``groups()`` makes on demand (each alternative a generator)."""
        return cls(label, groups, outcomes)

    def iter_groups(self) -> Iterator[Group]:
        """The groups, made now when ``groups`` is a function."""
        return iter(self.groups() if callable(self.groups) else self.groups)

    @property
    def upper_bound(self) -> bool:
        if self.outcomes is not None:
            return self.outcomes
        if callable(self.groups):
            raise ValueError(f"plan step {self.label!r}: a streamed step states `outcomes`")
        return any(len(g) > 1 for g in self.groups)

    def requests(self) -> list[GenerationRequest]:
        """Every request of every alternative, in one list (for tests and small steps; planning
        streams them instead)."""
        return [r for g in self.iter_groups() for alt in g for r in alt]


def plan_steps(
    steps: Sequence[PlanStep],
    spec: ModelSpec,
    cached: Iterable[str] = (),
    *,
    count: Callable[[GenerationRequest], int] | None = None,
    method: str | None = None,
    lookup: Callable[[list[str]], Iterable[str]] | None = None,
) -> list[CostPlan]:
    """The :class:`CostPlan` of each step, in order (see :class:`PlanStep`), streamed through
    :func:`plan_requests` (``lookup``: the cache, as there)."""
    known = set(cached)
    earlier: dict[str, str] = {}  # key -> the exact step of this run that calls it
    out = []
    for step in steps:
        parts = []
        step_keys: set[str] | None = None if step.upper_bound else set()
        for group in step.iter_groups():
            options = [
                plan_requests(
                    alt, spec, known, count=count, method=method, lookup=lookup, seen=step_keys, earlier=earlier
                )
                for alt in group
            ]
            parts.append(max(options, key=lambda p: (p.cost_usd or 0.0, p.calls, p.input_tokens)))
        whole = total(parts) if parts else plan_requests([], spec, count=count, method=method)
        out.append(CostPlan(**{**whole.__dict__, "label": step.label, "upper_bound": step.upper_bound}))
        if step_keys is not None:
            for k in step_keys:
                earlier.setdefault(k, step.label)
    return out


def plan_study(study: str, spec: ModelSpec, options: Any, cache: Any = None, provider: Any = None) -> list[CostPlan]:
    """Every generation step's :class:`CostPlan` of ``study`` for one model, from the sources as the
    run loads them (:attr:`metamorph.study.Study.cost_steps`: the study's own loaders and request
    builders, with the assets' defaults; ``options``: the study's :class:`metamorph.study.Options`;
    the steps of assets the options leave out of the run, :meth:`metamorph.study.Study.dropped_assets`,
    are not planned).
    The requests' keys are looked up in ``cache`` (a :class:`~metamorph.cache.GenerationCache`;
    ``None``: nothing cached) :data:`PLAN_CHUNK` at a time as the requests stream; the tokenizer
    is loaded only if some call remains.

    Raises the loaders' :class:`~metamorph.errors.InputError`; :class:`ConfigError` for an unknown study.
    """
    steps = _study_steps(study, spec, options)
    count, method = _lazy_counter(spec, provider)
    lookup = None if cache is None else (lambda keys: cache.get_many(keys).keys())
    return plan_steps(steps, spec, count=count, method=method, lookup=lookup)


def plan_calls(study: str, spec: ModelSpec, options: Any) -> tuple[int, bool]:
    """``(calls, upper_bound)`` of :func:`plan_study` with nothing cached: the calls ``metamorph plan
    <study> --models <id>`` prints for ``spec`` and ``options`` on an empty generation cache ("up to"
    when ``upper_bound``), without counting tokens.

    The same steps and the same choice of the largest alternative as :func:`plan_study`: an API
    model's prompts are estimated as there (characters / 4, no tokenizer), and a ``llama_cpp`` model
    is planned with its prompts counted as 0 tokens — its cost is 0, so the largest alternative is
    the one with the most calls whatever the token counts, and no GGUF is loaded. Its time grows with
    the rows (the sources are loaded and every request is built and keyed; docs/benchmarks.md).
    Raises what :func:`plan_study` raises.
    """
    steps = _study_steps(study, spec, options)
    if spec.provider == "llama_cpp":
        count, method = (lambda request: 0), METHOD_TOKENIZER
    else:
        count, method = estimate_tokens, METHOD_ESTIMATE
    whole = total(plan_steps(steps, spec, count=count, method=method) or [plan_requests([], spec, count=count)])
    return whole.calls, whole.upper_bound


def _study_steps(study: str, spec: ModelSpec, options: Any) -> list[PlanStep]:
    """The steps of ``study``'s run for ``spec`` (``Study.cost_steps``) minus those of the assets
    ``options`` leave out. Raises :class:`ConfigError` for an unknown study, the loaders' errors."""
    from metamorph.study import studies

    found = studies()
    if study not in found:
        raise ConfigError(f"metamorph plan: study {study!r} is not planned; choose one of {sorted(found)}")
    dropped = found[study].dropped_assets(options)  # e.g. --no-routing: the run leaves these assets out
    return [st for st in found[study].cost_steps(spec, options) if st.label.split(" ")[0] not in dropped]


def budget_steps(plans: Sequence[CostPlan]) -> list[CostPlan]:
    """The plans as the run's budget checks see them: one per generation asset. A step whose label
    is ``<asset> <part>`` (``perturbations_llm retries``) is added to the asset's other parts
    (:func:`total`, labelled ``<asset>``), since the asset checks them together before its first call."""
    groups: dict[str, list[CostPlan]] = {}
    for p in plans:
        groups.setdefault(p.label.split(" ")[0], []).append(p)
    return [ps[0] if len(ps) == 1 else CostPlan(**{**total(ps).__dict__, "label": name}) for name, ps in groups.items()]


def _lazy_counter(spec: ModelSpec, provider: Any) -> tuple[Callable[[GenerationRequest], int], str]:
    """A counter that loads the tokenizer on its first call (so a fully cached plan loads none)."""
    method = METHOD_TOKENIZER if spec.provider == "llama_cpp" else METHOD_ESTIMATE
    state: dict[str, Callable[[GenerationRequest], int]] = {}

    def count(request: GenerationRequest) -> int:
        if "f" not in state:
            state["f"] = token_counter(spec, provider)[0]
        return state["f"](request)

    return count, method


# ------------------------------------------------------------------------------------------
# The `metamorph plan` command


def default_registry() -> str:
    """``$METAMORPH_MODELS`` or, unset or empty, ``<repo>/config/models.yaml`` (as ``resources.paths.registry_path``)."""
    return str(Path(os.environ.get("METAMORPH_MODELS") or REPO_ROOT / "config" / "models.yaml").resolve())


def default_cache() -> str:
    """``$METAMORPH_HOME/generation_cache.duckdb`` (home ``<repo>/data`` when unset or empty; as ``resources.paths``)."""
    return str(Path(os.environ.get("METAMORPH_HOME") or REPO_ROOT / "data").resolve() / "generation_cache.duckdb")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``metamorph plan <study>``: the study's options (those of ``metamorph run <study>``,
    :func:`metamorph.study.add_study_commands`) plus ``--registry``, ``--cache`` and the detectable
    effects' ``--detect``, ``--alpha``, ``--power``, ``--discordance`` (:func:`metamorph.power.add_plan_arguments`)."""
    from metamorph.study import add_study_commands

    def plan_options(sub: argparse.ArgumentParser) -> None:
        own = sub.add_argument_group("plan")
        own.add_argument(
            "--registry", default=None, help="registry YAML (default $METAMORPH_MODELS or config/models.yaml)"
        )
        own.add_argument(
            "--cache",
            default=None,
            help="generation cache DuckDB file (default "
            "$METAMORPH_HOME/generation_cache.duckdb; a missing file is an empty cache and is not created)",
        )
        from metamorph.power import add_plan_arguments

        add_plan_arguments(own)

    add_study_commands(p, plan_options)


def run(args: argparse.Namespace) -> int:
    """Print every model's plan; exit 0, 1 when a step's plan exceeds ``--budget-usd`` (as the run's
    ``budget_usd`` is checked: per generation step and model), 2 on bad input. The sources are
    loaded once for every model and the detectable effects (:func:`metamorph.study.sources_loaded_once`)."""
    from metamorph.study import sources_loaded_once

    with sources_loaded_once():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from metamorph.study import chosen_models, get

    from metamorph.providers.llama_cpp import DEFAULT_N_CTX

    study = get(args.study)
    options = study.from_args(args)
    out: list[str] = []  # printed once the whole plan is made: bad input prints its one line only
    try:
        # the suite's sources, options and models (pipelines/defs/<suite>/defs.yaml; without --suite the
        # study's default suite's) under the given ones; the suites are Dagster components, read by the
        # project that installs SUITES_GROUP
        hook = suite_hook()
        if hook is not None:
            given = {n: getattr(options, n) for n in options.given}
            options = hook.load()(study, getattr(args, "suite", None), given)
        elif getattr(args, "suite", None) not in (None, study.name):
            raise ConfigError(f"--suite {args.suite}: no project with suites is installed")
        specs = chosen_models(
            load_registry(args.registry or default_registry()), options.models, options.origins.get("models")
        )
        check_study_kinds(study.name, study.takes_documents, specs)
        for spec in specs:  # as the run refuses it, before anything is counted
            check_max_tokens(spec, options.max_tokens, DEFAULT_N_CTX)
        cache_file = args.cache or default_cache()
        cache = None
        if os.path.exists(cache_file):
            from metamorph.cache import GenerationCache

            cache = GenerationCache(cache_file, read_only=True)  # plan writes nothing: a read-only home serves
        over, shown = [], []
        out.append(
            f"Plan of {args.study} (cache: {cache_file if cache is not None else 'none, ' + cache_file + ' absent'})"
        )
        try:
            for spec in specs:
                if study.plan_notes is not None:  # what the run will not send, before its counts
                    out += ["  " + line for line in study.plan_notes(spec, options)]
                plans = plan_study(args.study, spec, options, cache)
                shown += plans
                out += ["  " + p.line() for p in plans]
                whole = total(plans) if len(plans) > 1 else plans[0]
                if len(plans) > 1:
                    out.append("  " + whole.line())
                for p in budget_steps(plans):  # the run checks each step's plan before that step's first call
                    try:
                        check_budget(p, options.budget_usd, "the run would stop before this step's first call")
                    except BudgetError as exc:
                        over.append(str(exc))
        finally:
            if cache is not None:
                cache.release()
        from metamorph.power import plan_lines

        out += plan_lines(args.study, args, options, specs, shown)
        notes = [OUTPUT_NOTE + ".", f"Input tokens: local models {METHOD_TOKENIZER}; API models {METHOD_ESTIMATE}."]
        if any(p.upper_bound for p in shown):
            notes.append(
                "'up to': the step's requests depend on outcomes (e.g. which format turns out best, or "
                "whether a generated workflow passes validation); its counts are the most over every "
                "possible outcome."
            )
        out.append("Notes: " + " ".join(notes))
    except MetamorphError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(out))
    for line in over:
        print(f"over budget: {line}", file=sys.stderr)
    return 1 if over else 0


#: ``metamorph plan`` (collected by :mod:`metamorph.cli` as a core command).
COMMANDS = {
    "plan": (
        "print the calls, cache hits, tokens and cost a study's run will make",
        "Enumerate the exact requests a study's run will send for each registry model (the study's "
        "own loaders and plan module), look their keys up in the generation cache and print the calls "
        "left, their input tokens (counted with a local model's tokenizer, else estimated as "
        "characters / 4), the max_tokens upper bound of their output and the cost at the registry's "
        "price_per_mtok.",
        add_arguments,
        run,
    )
}
