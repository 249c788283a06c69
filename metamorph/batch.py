"""Provider batch APIs: send a run's cache misses as OpenAI Batch / Anthropic Message Batches jobs.

A registry entry with ``execution: {mode: batch}`` (:class:`metamorph.models.ExecutionConfig`)
gets a :class:`BatchExecution` provider; :func:`metamorph.runner.run_requests` hands the misses of
such a provider to :func:`run_batches`:

1. **resume**: the batches persisted in the cache (table ``batches``, :meth:`GenerationCache.open_batches`)
   that are not collected yet and carry one of the missing keys are polled, not resubmitted;
2. **submit**: the other misses are claimed (:meth:`GenerationCache.claim`; keys another runner
   holds go back to the synchronous path) and sent in jobs of at most ``max_requests``, one
   request per generation key with ``custom_id`` = the key:

   * OpenAI / OpenAI-compatible: a JSONL file (one line ``{"custom_id", "method": "POST", "url":
     "/v1/chat/completions", "body"}`` per request, the body being exactly what
     :class:`~metamorph.providers.openai_provider.OpenAIProvider` sends synchronously, its
     ``extra_body`` merged in) uploaded with ``files.create(purpose="batch")``, then
     ``batches.create(endpoint="/v1/chat/completions", completion_window="24h")``;
   * Anthropic: ``messages.batches.create(requests=[{"custom_id", "params"}])``, ``params`` being
     what :class:`~metamorph.providers.anthropic_provider.AnthropicProvider` sends (documents as
     inline blocks);

   each job is persisted (batch id, provider, base_url, model, keys, request JSON, status, submitted_at
   — no secret) right after the provider accepted it;
3. **poll** every ``poll_interval_s`` (OpenAI ``batches.retrieve`` until completed / failed /
   expired / cancelled; Anthropic ``messages.batches.retrieve`` until ``ended``); an ended job's
   results are downloaded (OpenAI ``files.content`` of ``output_file_id`` and ``error_file_id``;
   Anthropic ``messages.batches.results``) and written to the cache under their keys: a success as
   the synchronous call would store it (same parsing; ``latency_s`` is ``None``, a batch has none per
   request), a per-request failure as an **error** (``BatchError[<code>]: ...``), and a key with no
   result line (expired, cancelled, failed job) as an error too. The rows are committed, then the
   job is marked collected. A rerun resubmits exactly the keys that ended as errors;
4. after ``max_wait_s`` the run stops polling: the unfinished keys come back as errors that are
   **not** stored (``BatchPending: ...``) and the job stays persisted, so the next run resumes it.

Requests a batch endpoint cannot carry (OpenAI ``openai_file`` — a Responses call —, Anthropic
documents through the Files API beta) are left to the synchronous path. Every SDK call goes through
the provider's own error translation (:func:`metamorph.providers.sdk_errors.sdk_errors`: the API key
is redacted) and :func:`metamorph.providers.retry.call_with_retries`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from metamorph.cache import BatchRecord, GenerationCache
from metamorph.models import ExecutionConfig
from metamorph.providers.base import GenerationRequest, GenerationResult, Provider, ProviderError
from metamorph.providers.retry import RetryPolicy, call_with_retries

__all__ = ["BatchExecution", "run_batches", "OPENAI_BATCH_ENDPOINT", "OPENAI_TERMINAL"]

#: The OpenAI batch endpoint the JSONL lines target.
OPENAI_BATCH_ENDPOINT = "/v1/chat/completions"
#: OpenAI batch statuses after which no request of the job runs any more.
OPENAI_TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})


class BatchExecution:
    """A provider whose cache misses :func:`metamorph.runner.run_requests` sends as batch jobs.

    ``inner`` is the :class:`~metamorph.providers.openai_provider.OpenAIProvider` or
    :class:`~metamorph.providers.anthropic_provider.AnthropicProvider` whose client and request
    building the jobs use; ``generate`` (one synchronous attempt) delegates to it, for the requests
    a batch cannot carry. ``config`` is the registry entry's :class:`ExecutionConfig`.

    Raises:
        ValueError: ``inner`` is not an OpenAI or Anthropic provider.
    """

    def __init__(self, inner: Provider, config: ExecutionConfig):
        if inner.kind not in ("openai", "openai_compatible", "anthropic"):
            raise ValueError(f"provider kind {inner.kind!r} has no batch API")
        self.inner = inner
        self.config = config
        self.kind = inner.kind
        self.max_concurrency = inner.max_concurrency

    def __repr__(self) -> str:
        return f"BatchExecution({self.inner!r}, {self.config!r})"

    def generate(self, request: GenerationRequest) -> GenerationResult:
        return self.inner.generate(request)

    def is_deterministic(self, request: GenerationRequest) -> bool:
        """The inner provider's declaration (:func:`metamorph.replicates.provider_deterministic`)."""
        from metamorph.replicates import provider_deterministic

        return provider_deterministic(self.inner, request)

    def backend(self) -> "_OpenAIBatches | _AnthropicBatches":
        return _AnthropicBatches(self.inner) if self.kind == "anthropic" else _OpenAIBatches(self.inner)


def _error(code: Any, message: str) -> GenerationResult:
    return GenerationResult(text=None, error=f"BatchError[{code}]: {message}")


class _OpenAIBatches:
    """OpenAI Batch API through the provider's client (``files`` + ``batches``)."""

    def __init__(self, provider: Any):
        self.p = provider
        self.client = provider.client

    def batchable(self, request: GenerationRequest) -> bool:
        return request.ingestion == "inline"

    def line(self, key: str, request: GenerationRequest) -> dict[str, Any]:
        """The JSONL line of ``request`` (raises ConfigError like the synchronous call would)."""
        self.p.check_request(request)
        body = self.p.chat_kwargs(request)
        body.update(body.pop("extra_body", None) or {})
        return {"custom_id": key, "method": "POST", "url": OPENAI_BATCH_ENDPOINT, "body": body}

    def submit(self, lines: list[dict[str, Any]]) -> tuple[str, str, str | None]:
        data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode("utf-8")
        uploaded = self.p.call(
            self.client.files.create, file=("metamorph-batch.jsonl", data, "application/jsonl"), purpose="batch"
        )
        batch = self.p.call(
            self.client.batches.create,
            input_file_id=uploaded.id,
            endpoint=OPENAI_BATCH_ENDPOINT,
            completion_window="24h",
        )
        return batch.id, batch.status, uploaded.id

    def retrieve(self, batch_id: str) -> tuple[str, bool, Any]:
        batch = self.p.call(self.client.batches.retrieve, batch_id=batch_id)
        return batch.status, batch.status in OPENAI_TERMINAL, batch

    def collect(self, batch_id: str, batch: Any) -> tuple[dict[str, GenerationResult], str]:
        """Results per custom_id from the output and error files, and what to say about keys without one."""
        from openai.types.chat import ChatCompletion

        out: dict[str, GenerationResult] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            text = self.p.call(lambda timeout: self.client.files.content(file_id, timeout=timeout).text)
            for n, raw in enumerate(text.splitlines(), start=1):
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                    key = obj["custom_id"]
                except (ValueError, KeyError, TypeError) as exc:
                    raise ProviderError(
                        f"OpenAI batch {batch_id}: file {file_id} line {n} is not a result line "
                        f"({type(exc).__name__}: {exc})",
                        retryable=False,
                    ) from None
                err, response = obj.get("error"), obj.get("response") or {}
                status, body = response.get("status_code"), response.get("body") or {}
                if err:
                    out[key] = _error(
                        err.get("code"), self.p.redact(f"OpenAI batch request failed: {err.get('message')}")
                    )
                elif status != 200:
                    msg = (body.get("error") or {}).get("message") if isinstance(body, dict) else None
                    out[key] = _error(
                        status, self.p.redact(f"OpenAI batch request failed (HTTP {status}): {msg or body}")
                    )
                else:
                    try:
                        out[key] = self.p.chat_result(ChatCompletion.model_validate(body), None)
                    except ProviderError as exc:
                        out[key] = GenerationResult(text=None, error=f"ProviderError[{exc.status}]: {exc}")
                    except Exception as exc:  # a body that is no chat completion: recorded, never a value
                        out[key] = _error(
                            "invalid", f"OpenAI batch result is not a chat completion: {type(exc).__name__}"
                        )
        why = ""
        errors = getattr(getattr(batch, "errors", None), "data", None) or []
        if errors:
            why = "; " + "; ".join(f"{e.code}: {e.message}" for e in errors[:3])
        return out, why


class _AnthropicBatches:
    """Anthropic Message Batches through the provider's client (``messages.batches``)."""

    def __init__(self, provider: Any):
        self.p = provider
        self.client = provider.client

    def batchable(self, request: GenerationRequest) -> bool:
        return request.ingestion == "inline" or not self.p.use_files_api

    def line(self, key: str, request: GenerationRequest) -> dict[str, Any]:
        from metamorph.providers.anthropic_provider import inline_source

        params = self.p.message_kwargs(request)
        if request.ingestion == "anthropic_document":
            doc = request.document
            params["messages"][-1]["content"].insert(
                0, {"type": "document", "source": inline_source(doc), "title": doc.filename}
            )
        params.update(params.pop("extra_body", None) or {})
        return {"custom_id": key, "params": params}

    def submit(self, lines: list[dict[str, Any]]) -> tuple[str, str, str | None]:
        batch = self.p.call(self.client.messages.batches.create, requests=lines)
        return batch.id, batch.processing_status, None

    def retrieve(self, batch_id: str) -> tuple[str, bool, Any]:
        batch = self.p.call(self.client.messages.batches.retrieve, message_batch_id=batch_id)
        return batch.processing_status, batch.processing_status == "ended", batch

    def collect(self, batch_id: str, batch: Any) -> tuple[dict[str, GenerationResult], str]:
        from metamorph.providers.anthropic_provider import message_result

        items = self.p.call(lambda timeout: list(self.client.messages.batches.results(batch_id, timeout=timeout)))
        out: dict[str, GenerationResult] = {}
        for item in items:
            result = item.result
            if result.type == "succeeded":
                try:
                    out[item.custom_id] = message_result(result.message, None)
                except ProviderError as exc:
                    out[item.custom_id] = GenerationResult(text=None, error=f"ProviderError[{exc.status}]: {exc}")
            elif result.type == "errored":
                e = result.error.error
                out[item.custom_id] = _error(e.type, f"Anthropic batch request errored: {e.message}")
            else:  # canceled / expired
                out[item.custom_id] = _error(result.type, f"Anthropic batch {batch_id}: request {result.type}")
        return out, ""


def run_batches(
    todo: dict[str, GenerationRequest],
    execution: BatchExecution,
    cache: GenerationCache,
    *,
    retry: RetryPolicy | None = None,
    log: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[dict[str, tuple[GenerationResult, bool]], dict[str, GenerationRequest]]:
    """Serve the cache misses ``todo`` (key -> request) through provider batch jobs (module docstring).

    Returns ``(results, left)``: ``results`` maps each key handled here to ``(result, served from
    the cache)`` (a key another runner stored meanwhile is served from the cache); ``left`` holds the
    requests for the synchronous path (not batchable, or claimed by another live runner). Every
    result of a collected job is stored (also for keys of that job this run did not ask for);
    ``BatchPending`` results (``max_wait_s`` reached) are not. Never raises for a provider failure:
    a submission that fails (after retries) stores an error for each of its keys; a job the
    provider no longer knows (non-retryable poll error, e.g. 404) stores errors and is marked
    collected with status ``lost``.
    """
    retry = retry or RetryPolicy()
    cfg = execution.config
    backend = execution.backend()
    results: dict[str, tuple[GenerationResult, bool]] = {}
    left = {k: r for k, r in todo.items() if not backend.batchable(r)}
    wanted = {k: r for k, r in todo.items() if k not in left}
    if not wanted:
        return results, left
    base_url = getattr(execution.inner, "base_url", None)

    tracked: dict[str, BatchRecord] = {}
    for model in sorted({r.model for r in wanted.values()}):
        for rec in cache.open_batches(execution.kind, base_url, model):
            if not wanted.keys().isdisjoint(rec.keys):
                tracked[rec.batch_id] = rec
    in_open = {k for rec in tracked.values() for k in rec.keys}
    if tracked:
        log(
            f"batch: resuming {len(tracked)} submitted batch(es) ({sorted(tracked)}) holding "
            f"{len(in_open & wanted.keys())} of the requests"
        )

    new = [k for k in wanted if k not in in_open]
    got = cache.claim(new)
    for k, res in got.done.items():
        results[k] = (res, True)
    for k in got.busy:
        left[k] = wanted[k]
    lines: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for k in got.claimed:
        req = wanted[k]
        try:
            lines.setdefault(req.model, []).append((k, backend.line(k, req)))
        except Exception as exc:  # a request the provider cannot take (ConfigError): recorded like a sync call
            res = GenerationResult(text=None, error=f"{type(exc).__name__}: {exc}")
            cache.put(req, res)
            results[k] = (res, False)
    for model, model_lines in lines.items():
        for i in range(0, len(model_lines), cfg.max_requests):
            chunk = model_lines[i : i + cfg.max_requests]
            keys = [k for k, _ in chunk]
            try:
                (batch_id, status, file_id), _ = call_with_retries(lambda: backend.submit([x for _, x in chunk]), retry)
            except Exception as exc:  # ProviderError after retries, or an SDK surprise: recorded per key
                for k in keys:
                    what = f"ProviderError[{exc.status}]" if isinstance(exc, ProviderError) else type(exc).__name__
                    res = GenerationResult(
                        text=None, error=f"{what}: batch submission failed: {exc}", attempts=getattr(exc, "attempts", 1)
                    )
                    cache.put(wanted[k], res)
                    results[k] = (res, False)
                continue
            rec = BatchRecord(
                batch_id=batch_id,
                provider=execution.kind,
                base_url=base_url,
                model=model,
                keys=tuple(keys),
                requests=tuple(wanted[k].to_json() for k in keys),
                status=status,
                collected=False,
                input_file_id=file_id,
                submitted_at=datetime.now(timezone.utc).replace(tzinfo=None),
            )
            cache.record_batch(rec)
            tracked[batch_id] = rec
            log(f"batch: submitted {batch_id} with {len(keys)} requests ({execution.kind} {model})")

    deadline = clock() + cfg.max_wait_s
    while tracked:
        for batch_id, rec in list(tracked.items()):
            try:
                (status, ended, info), _ = call_with_retries(lambda: backend.retrieve(batch_id), retry)
                if ended:
                    (found, why), _ = call_with_retries(lambda: backend.collect(batch_id, info), retry)
            except ProviderError as exc:
                if exc.retryable:  # retries exhausted on a transient fault: poll again next round
                    log(f"batch: polling {batch_id} failed ({exc}); will poll again")
                    continue
                status, ended = "lost", True
                found, why = {}, f"; the provider answered {exc}"
            except Exception as exc:  # an SDK surprise or a bug: keep the batch (its results may be paid for)
                log(f"batch: polling {batch_id} failed ({type(exc).__name__}: {exc}); it stays persisted")
                for key in rec.keys:
                    if key in wanted:
                        results[key] = (
                            GenerationResult(
                                text=None,
                                error=f"BatchPending: polling batch {batch_id} failed ({type(exc).__name__}: "
                                f"{exc}); a rerun resumes polling it",
                            ),
                            False,
                        )
                del tracked[batch_id]
                continue
            if status != rec.status:
                cache.update_batch(batch_id, status)
                tracked[batch_id] = rec = dataclasses.replace(rec, status=status)
                log(f"batch: {batch_id} is {status}")
            if not ended:
                continue
            for key, request_json in zip(rec.keys, rec.requests):
                res = found.get(key) or _error(
                    status, f"batch {batch_id} ended ({status}) without a result for this request{why}"
                )
                cache.put_row(key, rec.provider, rec.model, request_json, res)
                if key in wanted:
                    results[key] = (res, False)
            cache.flush()  # the rows are committed before the batch is marked collected
            cache.update_batch(batch_id, status, collected=True)
            del tracked[batch_id]
            n_ok = sum(1 for k in rec.keys if found.get(k) is not None and found[k].error is None)
            log(f"batch: collected {batch_id} ({status}): {n_ok} completions, {len(rec.keys) - n_ok} errors")
        if not tracked:
            break
        now = clock()
        if now >= deadline:
            for batch_id, rec in tracked.items():
                for key in rec.keys:
                    if key in wanted:
                        results[key] = (
                            GenerationResult(
                                text=None,
                                error=f"BatchPending: batch {batch_id} still {rec.status} after "
                                f"max_wait_s={cfg.max_wait_s:g}; a rerun resumes polling it",
                            ),
                            False,
                        )
            log(
                f"batch: stopped waiting after {cfg.max_wait_s:g} s; {sorted(tracked)} stay persisted "
                "and are resumed by the next run"
            )
            break
        sleep(min(cfg.poll_interval_s, deadline - now))
    return results, left
