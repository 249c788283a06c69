"""Running many generation requests through the cache with bounded concurrency.

:func:`run_requests` is the one way studies call models:

1. every request's cache key is looked up; hits are served without calling the provider;
2. misses run at most ``provider.max_concurrency`` at a time, each call wrapped in
   :func:`metamorph.providers.retry.call_with_retries` (408/409/429/5xx/529/overloaded retried
   with exponential backoff and jitter, ``Retry-After`` honoured, bounded total time). A provider
   with an ``async_session`` (openai, openai_compatible, anthropic) is called from tasks on one
   event loop in one thread (:func:`~metamorph.providers.retry.acall_with_retries`), and how many
   of its requests are in flight adapts to the server: a 429 / 503 / 529 halves it, ``Retry-After``
   holds new requests, successes raise it back to ``max_concurrency``
   (:class:`~metamorph.providers.adaptive.AdaptiveLimit`); other providers (local models,
   workflows under test) run on ``max_concurrency`` threads;
3. misses are claimed in the cache just before they are sent, so two runners sharing a cache
   do not call the same key; each finished completion (or final error) is queued to the cache's
   group-committing writer (committed within a fraction of a second, all of it before return);
4. a short progress line (:meth:`RunStats.progress`: done/total, cache hits, errors, elapsed, time
   left) goes to ``log`` at most every ``progress_every_s`` seconds, only when a request finished
   since the last one; at the end, one line with the tokens too (:meth:`RunStats.line`);
5. when the provider reports a resolved model version the cache has not seen for the same model
   name, a warning is logged once per new version;
6. the replicates of a greedy request the provider declares deterministic (:mod:`metamorph.replicates`:
   e.g. a local model at temperature 0) are one computation: the request as replicate 1 is called
   (or served) once, and each replicate's :class:`Outcome` points to it (``shared``);
7. a run of many calls to a provider with an ``async_session`` is spread over several client
   processes (:data:`PROCESS_MIN_CALLS`, :func:`client_processes`): one event loop per usable
   core, each with its share of ``max_concurrency`` (and its own adaptive limit), streaming its
   results back to this process, which alone claims and writes the cache; one event loop is
   one core at most;
8. a :class:`~metamorph.batch.BatchExecution` provider (registry ``execution: {mode: batch}``)
   sends the misses as provider batch jobs instead (:func:`metamorph.batch.run_batches`: persisted,
   polled, resumed by a rerun); the requests a batch cannot carry take steps 2-3.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from queue import SimpleQueue
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd

from metamorph.batch import BatchExecution, run_batches
from metamorph.cache import GenerationCache
from metamorph.client_calls import AsyncCalls, ProcessCalls, Stopped, drain, failed, latency
from metamorph.providers.base import GenerationRequest, GenerationResult, Provider
from metamorph.providers.retry import RetryPolicy, call_with_retries
from metamorph.replicates import computation, is_shared, provider_deterministic

__all__ = [
    "GENERATION_COLUMNS",
    "Outcome",
    "PROCESS_MIN_CALLS",
    "PROCESS_MIN_CONCURRENCY",
    "RunStats",
    "client_processes",
    "generation_frame",
    "run_requests",
]


def _duration(seconds: float) -> str:
    """``42s``, ``9m47s``, ``3h15m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@dataclass
class RunStats:
    """Counters of one :func:`run_requests` call. ``prompt_tokens`` / ``completion_tokens`` are
    those of the calls made now; ``cached_*`` those carried by the completions served from cache."""

    total: int = 0
    done: int = 0
    cache_hits: int = 0
    calls: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    #: requests served by another replicate's computation (deterministic decoding; not calls)
    shared: int = 0
    started: float = field(default_factory=time.monotonic)
    version_changes: list[str] = field(default_factory=list)

    def line(self) -> str:
        """The summary logged when a run ends, e.g. ``144/144 done, 0 cache hits, 0 errors, prompt +
        completion tokens 47802+12231 called, 0+0 from cache, 39m49s elapsed``."""
        elapsed = time.monotonic() - self.started
        shared = f" ({self.shared} replicates share a deterministic computation)" if self.shared else ""
        return (
            f"{self.done}/{self.total} done{shared}, {self.cache_hits} cache hits, {self.errors} errors, "
            f"prompt + completion tokens {self.prompt_tokens}+{self.completion_tokens} called, "
            f"{self.cached_prompt_tokens}+{self.cached_completion_tokens} from cache, {_duration(elapsed)} elapsed"
        )

    def progress(self) -> str:
        """The line a person watches during a run, e.g. ``7/144 done, 0 from cache, 0 errors,
        9m47s elapsed, about 3h15m left`` (time left = elapsed per call made × requests left)."""
        elapsed = time.monotonic() - self.started
        remaining = self.total - self.done
        made = self.done - self.cache_hits
        left = f", about {_duration(elapsed / made * remaining)} left" if made > 0 and remaining else ""
        return (
            f"{self.done}/{self.total} done, {self.cache_hits} from cache, {self.errors} errors, "
            f"{_duration(elapsed)} elapsed{left}"
        )

    def tokens(self) -> dict[str, int]:
        """Prompt/completion tokens of this run: called now, and carried by cached completions."""
        return {
            "prompt": self.prompt_tokens,
            "completion": self.completion_tokens,
            "cached_prompt": self.cached_prompt_tokens,
            "cached_completion": self.cached_completion_tokens,
        }


@dataclass(frozen=True)
class Outcome:
    """A request with its result and whether the cache served it.

    ``key`` is the cache key of the generation that answered ``request``: its own, or — when
    ``shared`` — that of the deterministic computation its replicates share
    (:func:`metamorph.replicates.computation`)."""

    request: GenerationRequest
    key: str
    result: GenerationResult
    cache_hit: bool
    shared: bool = False


#: A run calls a provider with an ``async_session`` from several client processes only when it has
#: at least this many calls to make: starting a process (a fresh interpreter importing the SDK)
#: costs ~0.7 s of CPU, 0.35 ms per call per process at 2,000 calls (a call costs ~1.3 ms), while
#: one event loop, one core at most, takes ~4 s for them at ~500 calls/s.
PROCESS_MIN_CALLS = 2000

#: ... and ``max_concurrency`` is at least this: each process keeps at least
#: ``PROCESS_MIN_CONCURRENCY // 2`` calls in flight; a server that takes fewer at once (a local
#: model's server) cannot answer faster than one event loop sends.
PROCESS_MIN_CONCURRENCY = 64


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def client_processes(provider: Provider, calls: int, processes: int | None = None) -> int:
    """How many client processes send ``calls`` calls of ``provider``: 1 (this process: one event
    loop, or threads) or N >= 2 (N processes, an event loop each).

    ``processes`` (``run_requests(..., processes=)``) forces it (clipped to ``max_concurrency``);
    ``None`` chooses: N = :func:`usable_cores` (at most ``max_concurrency //
    (PROCESS_MIN_CONCURRENCY // 2)``) when the provider has an ``async_session`` and can be sent to
    a process (``__reduce__``), ``calls >= PROCESS_MIN_CALLS`` and ``max_concurrency >=
    PROCESS_MIN_CONCURRENCY``; else 1. A provider without an ``async_session`` (local models,
    workflows under test) always runs in this process.
    """
    if not hasattr(provider, "async_session") or "__reduce__" not in type(provider).__dict__:
        return 1
    concurrency = max(1, provider.max_concurrency)
    if processes is not None:
        return max(1, min(int(processes), concurrency))
    if calls < PROCESS_MIN_CALLS or concurrency < PROCESS_MIN_CONCURRENCY:
        return 1
    return max(1, min(usable_cores(), concurrency // (PROCESS_MIN_CONCURRENCY // 2)))


def run_requests(
    requests: Sequence[GenerationRequest],
    provider: Provider,
    cache: GenerationCache,
    *,
    retry: RetryPolicy | None = None,
    log: Callable[[str], None] = print,
    warn: Callable[[str], None] | None = None,
    progress_every_s: float = 10.0,
    poll_s: float = 0.5,
    stale_before: datetime | None = None,
    processes: int | None = None,
) -> tuple[list[Outcome], RunStats]:
    """Serve ``requests`` from the cache or the provider; outcomes come back in input order.

    ``stale_before`` (naive UTC): completions stored before that instant are called again and
    replaced — the re-evaluation the registry sensor launches when a provider serves another model
    version under the same name (run tag ``metamorph/stale_before``); the request, hence the key,
    is the same, so without it the re-run would be served the old version's completions.

    ``processes``: how many client processes call a provider with an ``async_session``
    (:func:`client_processes`; ``None``: chosen from the number of calls, ``max_concurrency`` and
    the usable cores). With N >= 2, each process runs an event loop with its share of
    ``max_concurrency`` and its own :class:`~metamorph.providers.adaptive.AdaptiveLimit` (a 429
    there lowers what that process keeps in flight); the results, and what is stored, are those of
    one process. A process that dies makes the run raise ``RuntimeError`` once the others have
    returned their calls in flight (stored); none outlives the run.

    Duplicate requests (same key) are called once; so are the replicates of a greedy request the
    provider declares deterministic (``provider.is_deterministic(request)``;
    :func:`metamorph.replicates.computation`): they are served by the request as replicate 1, and
    their outcomes say ``shared``. Errors never raise: they come back as
    results with ``error`` set, are stored as errors, and are retried on the next run.

    Misses are claimed in chunks (:meth:`GenerationCache.claim`) just before they are sent; a key
    another live runner holds is left to it and looked up again every ``poll_s`` seconds once
    this runner has nothing else to do (it is served from the cache when that runner stores it,
    or claimed here if that runner gave it up or died). On return (or an exception) every
    completion of this run is committed and the cache file is released.
    """
    retry = retry or RetryPolicy()
    warn = warn or log
    stats = RunStats(total=len(requests))
    deterministic = [provider_deterministic(provider, r) for r in requests]
    computed = [computation(r, d) for r, d in zip(requests, deterministic)]
    shared = [is_shared(r, d) for r, d in zip(requests, deterministic)]
    stats.shared = sum(shared)
    keys = [c.cache_key() for c in computed]
    try:
        results = _serve(
            keys, computed, provider, cache, retry, log, warn, progress_every_s, poll_s, stats, stale_before, processes
        )
    finally:
        cache.release()
    log("generation finished: " + stats.line())
    return [Outcome(r, k, results[k][0], results[k][1], s) for k, r, s in zip(keys, requests, shared)], stats


def _serve(
    keys: list[str],
    requests: Sequence[GenerationRequest],
    provider: Provider,
    cache: GenerationCache,
    retry: RetryPolicy,
    log: Callable[[str], None],
    warn: Callable[[str], None],
    progress_every_s: float,
    poll_s: float,
    stats: RunStats,
    stale_before: datetime | None = None,
    processes: int | None = None,
) -> dict[str, tuple[GenerationResult, bool]]:
    """The body of :func:`run_requests`: key -> (result, served from the cache)."""
    dup_count = Counter(keys)  # duplicates of a key count as done when their key finishes
    results: dict[str, tuple[GenerationResult, bool]] = {}

    def served(found: dict[str, GenerationResult]) -> None:
        for k, res in found.items():
            results[k] = (res, True)
            stats.cache_hits += dup_count[k]
            stats.done += dup_count[k]
            stats.cached_prompt_tokens += (res.prompt_tokens or 0) * dup_count[k]
            stats.cached_completion_tokens += (res.completion_tokens or 0) * dup_count[k]

    served(cache.get_many(keys, stale_before=stale_before))
    todo: dict[str, GenerationRequest] = {}
    for k, r in zip(keys, requests):
        if k not in results and k not in todo:
            todo[k] = r
    known_versions: dict[tuple[str, str], set[str]] = {}
    by_key = dict(todo)

    def finished(key: str, res: GenerationResult) -> None:
        results[key] = (res, False)
        n = dup_count[key]
        stats.done += n
        stats.calls += 1
        if res.error:
            stats.errors += n
        else:
            stats.prompt_tokens += res.prompt_tokens or 0
            stats.completion_tokens += res.completion_tokens or 0
            _check_version(by_key[key], res, cache, known_versions, stats, warn)

    last, last_done = time.monotonic(), stats.done
    if isinstance(provider, BatchExecution):  # misses go to provider batch jobs; what they cannot carry, below
        log(
            f"generation: {stats.total} requests, {stats.cache_hits} served from cache, {len(todo)} to send "
            f"({provider.kind}, batch mode)"
        )
        done, todo = run_batches(todo, provider, cache, retry=retry, log=log)
        served({k: res for k, (res, hit) in done.items() if hit})
        for key, (res, hit) in done.items():
            if not hit:
                finished(key, res)
        provider = provider.inner
        if not todo:
            return results
    n_proc = client_processes(provider, len(todo), processes) if todo else 1
    spread = f", {n_proc} client processes" if n_proc > 1 else ""
    log(
        f"generation: {stats.total} requests, {stats.cache_hits} served from cache, {len(todo)} to call "
        f"({provider.kind}, concurrency {provider.max_concurrency}{spread})"
    )
    if not todo:
        return results
    workers = max(1, provider.max_concurrency)
    queue, deferred, in_flight = deque(todo), [], 0
    polled = time.monotonic()
    wait_s = max(0.05, min(poll_s, progress_every_s / 2))
    if n_proc > 1:
        calls: Any = ProcessCalls(provider, retry, cache, n_proc)
    elif hasattr(provider, "async_session"):
        calls = AsyncCalls(provider, retry, cache.put)
    else:
        calls = _ThreadCalls(provider, retry, cache, workers)
    try:
        while queue or in_flight or deferred:
            while queue and in_flight < 2 * workers:  # claim ahead of the calls, in chunks (one query each)
                chunk = [queue.popleft() for _ in range(min(len(queue), 4 * workers))]
                got = cache.claim(chunk, stale_before=stale_before)
                served(got.done)
                deferred.extend(got.busy)
                calls.submit([(k, todo[k]) for k in got.claimed])
                in_flight += len(got.claimed)
            if deferred and not queue and time.monotonic() - polled >= poll_s:
                queue.extend(deferred)  # held by another runner: look again
                deferred.clear()
                polled = time.monotonic()
                continue
            if not in_flight:
                time.sleep(poll_s / 5)
                continue
            for key, res in calls.finished(wait_s):
                in_flight -= 1
                if res is not None:
                    finished(key, res)
            if stats.done != last_done and time.monotonic() - last >= progress_every_s:
                log("generation progress: " + stats.progress())
                last, last_done = time.monotonic(), stats.done
    except BaseException:
        # Ctrl-C / SIGTERM (Dagster raises its interrupt here) or an error: requests not started
        # are dropped and waits between retries end now, so the run stops once the calls in
        # flight return (their completions are stored) instead of waiting out the retries of
        # every queued request (up to RetryPolicy.max_total_s each); run_requests then commits
        # and releases this runner's claims.
        calls.close(interrupted=True)
        raise
    calls.close(interrupted=False)
    return results


class _ThreadCalls:
    """Calls on ``workers`` threads, each one :func:`call_with_retries` of ``provider.generate``
    (providers without an asynchronous session: local models, workflows under test)."""

    def __init__(self, provider: Provider, retry: RetryPolicy, cache: GenerationCache, workers: int) -> None:
        self.provider, self.retry, self.cache = provider, retry, cache
        self.done: SimpleQueue[tuple[str, GenerationResult | None]] = SimpleQueue()
        self.stop = threading.Event()  # set when the run is interrupted: no new attempt, no wait between attempts
        self.pool = ThreadPoolExecutor(max_workers=workers)

    def submit(self, items: list[tuple[str, GenerationRequest]]) -> None:
        for key, req in items:
            self.pool.submit(self._one, key, req)

    def finished(self, timeout: float) -> list[tuple[str, GenerationResult | None]]:
        """The calls finished since the last look (waits up to ``timeout`` s for the first):
        ``(key, result)``, result ``None`` for a call the interruption stopped (nothing stored)."""
        return drain(self.done, timeout)

    def close(self, interrupted: bool) -> None:
        if interrupted:
            self.stop.set()
        self.pool.shutdown(wait=True, cancel_futures=interrupted)

    def _pause(self, seconds: float) -> None:
        if self.stop.wait(seconds):
            raise Stopped

    def _one(self, key: str, req: GenerationRequest) -> None:
        res = None
        try:
            t0 = time.monotonic()
            if self.stop.is_set():
                return
            try:
                res, attempts = call_with_retries(lambda: self.provider.generate(req), self.retry, sleep=self._pause)
                res = res.replace(attempts=attempts, latency_s=latency(res, t0))
            except Stopped:  # interrupted between attempts: nothing is stored, the key stays a miss
                return
            except Exception as exc:
                res = failed(exc)
            self.cache.put(req, res)
        finally:
            self.done.put((key, res))


def _check_version(
    req: GenerationRequest,
    res: GenerationResult,
    cache: GenerationCache,
    known: dict[tuple[str, str], set[str]],
    stats: RunStats,
    warn: Callable[[str], None],
) -> None:
    if not res.model_version:
        return
    ident = (req.provider, req.model)
    if ident not in known:
        known[ident] = cache.known_versions(*ident) - {res.model_version}
        previously = set(known[ident])
        if previously:
            msg = (
                f"model version change: {req.provider}/{req.model} now resolves to {res.model_version!r}; "
                f"the cache holds completions from {sorted(previously)}"
            )
            stats.version_changes.append(msg)
            warn(msg)
        known[ident].add(res.model_version)
    elif res.model_version not in known[ident]:
        msg = (
            f"model version change: {req.provider}/{req.model} now resolves to {res.model_version!r} "
            f"(seen before: {sorted(known[ident])})"
        )
        stats.version_changes.append(msg)
        warn(msg)
        known[ident].add(res.model_version)


#: Columns :func:`generation_frame` adds to every row: the per-generation lineage, declared once
#: (schema: :class:`metamorph.schemas.GenerationRecord`).
GENERATION_COLUMNS = (
    "generation_key",
    "shared_generation",
    "request_json",
    "response_text",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "model_version",
    "system_fingerprint",
    "cache_hit",
    "error",
    "extracted_text",
)


def generation_frame(
    ids: Sequence[dict[str, Any]], outcomes: Sequence[Outcome], prompt_tokens: Sequence[int | None] | None = None
) -> pd.DataFrame:
    """One row per generation: the study's id columns, then :data:`GENERATION_COLUMNS`.

    ``ids[i]`` (the study's lineage ids of request i, e.g. model_id, dataset, instance_id, format,
    repeat) and ``outcomes[i]`` (from :func:`run_requests`, same order) must have equal length
    (``ValueError`` otherwise). ``prompt_tokens`` overrides the provider-reported prompt tokens
    (e.g. counted with the model's tokenizer). Token columns are nullable ``Int64``;
    ``request_json`` is the canonical request (it carries no secrets: keys are never part of a
    request). ``generation_key`` is the generation that answered the row (:attr:`Outcome.key`);
    ``shared_generation`` says it is another replicate's (deterministic decoding), while
    ``request_json`` is the row's own request (its ``repeat_index``, its seed).
    """
    if len(ids) != len(outcomes) or (prompt_tokens is not None and len(prompt_tokens) != len(outcomes)):
        raise ValueError(
            f"generation_frame: {len(ids)} id rows, {len(outcomes)} outcomes"
            + ("" if prompt_tokens is None else f", {len(prompt_tokens)} prompt_tokens")
        )
    rows = []
    for i, (row_ids, o) in enumerate(zip(ids, outcomes)):
        r = o.result
        rows.append(
            {
                **row_ids,
                "generation_key": o.key,
                "shared_generation": o.shared,
                "request_json": o.request.to_json(),
                "response_text": r.text,
                "finish_reason": r.finish_reason,
                "prompt_tokens": r.prompt_tokens if prompt_tokens is None else prompt_tokens[i],
                "completion_tokens": r.completion_tokens,
                "latency_s": r.latency_s,
                "model_version": r.model_version,
                "system_fingerprint": r.system_fingerprint,
                "cache_hit": o.cache_hit,
                "error": r.error,
                "extracted_text": r.extracted_text,
            }
        )
    df = pd.DataFrame(rows, columns=[*(ids[0].keys() if ids else ()), *GENERATION_COLUMNS])
    for c in ("prompt_tokens", "completion_tokens"):
        df[c] = df[c].astype("Int64")
    return df
