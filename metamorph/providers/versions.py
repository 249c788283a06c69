"""Which model version a provider serves now: its ``models.list`` catalogue, and the rule that
decides whether a registry entry's evaluation is out of date (no Dagster import).

Two sources of "version":

* **reported**: every generation row carries ``model_version``, what the provider said served the
  request (OpenAI's response ``model``, e.g. ``gpt-4o-mini-2024-07-18``; Anthropic's message
  ``model``). The generation assets record the distinct reported versions of a partition in
  their materialization metadata (``reported_model_versions``).
* **listed**: ``GET /v1/models`` through the official SDK (``openai.OpenAI().models.list()``:
  ``id`` and ``created``, Unix seconds; ``anthropic.Anthropic().models.list()``: ``id`` and
  ``created_at``, an RFC 3339 time, auto-paginated). :func:`list_models` returns it as
  ``{id: created}`` in Unix seconds.

The rule (:func:`current_version`, :func:`version_change`). A *dated snapshot* id ends in a date:
``-YYYY-MM-DD`` (OpenAI, ``gpt-4o-mini-2024-07-18``) or ``-YYYYMMDD`` (Anthropic,
``claude-3-5-haiku-20241022``). For the registry entry's ``model`` M:

1. M is itself a dated snapshot (pinned): the current version is M's catalogue entry.
2. M is an alias and the catalogue lists dated snapshots ``M-<date>``: the current version is the
   one with the latest date *in its id*. ``models.list`` does not say where an alias points; this
   assumes it points at its newest snapshot. When the provider keeps an alias on an older
   snapshot, a newly listed snapshot triggers one re-evaluation that reports the old version
   again (the sensor's run key makes it at most one per snapshot).
3. M is an alias without listed snapshots: the current version is M's own entry.
4. M is not listed at all: unknown — no judgement (the generation calls will fail loudly if the
   model is gone).

A partition evaluated with reported versions R, materialized at time T (Unix seconds), is out of
date when, for the current version V (id, created):

* V is a dated snapshot (cases 1 and 2) and V's id is not in R — the provider now resolves the
  entry to another snapshot (``A → V``); or
* V's ``created`` is later than T — V (a snapshot, or an undated alias in case 3, whose id the
  responses never report) was (re)published after the evaluation.

Nothing is judged when R is empty (no successful generation, or a provider that reports no
version). Only ``openai`` and ``anthropic`` entries are polled (:data:`POLLED_PROVIDERS`).

The API key is only handed to the SDK (sent as ``Authorization: Bearer``); it never appears in a
return value or in the text of :class:`VersionPollError`.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from datetime import datetime, timezone

__all__ = [
    "POLLED_PROVIDERS",
    "ListedVersion",
    "VersionChange",
    "VersionPollError",
    "current_version",
    "is_dated_snapshot",
    "list_models",
    "version_change",
]

#: Providers whose ``models.list`` is polled.
POLLED_PROVIDERS = ("openai", "anthropic")

_DATED = re.compile(r"-(\d{4})-(\d{2})-(\d{2})$|-(\d{4})(\d{2})(\d{2})$")


class VersionPollError(Exception):
    """``models.list`` failed (HTTP error, connection error, timeout, unreadable reply); the message
    names the provider and the endpoint, never the API key."""


@dataclass(frozen=True)
class ListedVersion:
    """One ``models.list`` entry: ``id`` and ``created`` (Unix seconds, UTC)."""

    id: str
    created: int


@dataclass(frozen=True)
class VersionChange:
    """An out-of-date evaluation: ``before`` (the reported versions, comma-joined) and ``after``
    (the current version id, with ``created`` as an ISO time when that is what changed)."""

    before: str
    after: str

    @property
    def reason(self) -> str:
        """The run tag text: ``provider version changed: A → B``."""
        return f"provider version changed: {self.before} → {self.after}"


def is_dated_snapshot(model_id: str) -> bool:
    """Whether ``model_id`` ends in ``-YYYY-MM-DD`` or ``-YYYYMMDD`` (a real calendar date)."""
    return _snapshot_date(model_id) is not None


def _snapshot_date(model_id: str) -> tuple[int, int, int] | None:
    m = _DATED.search(model_id)
    if m is None:
        return None
    y, mo, d = (int(g) for g in (m.group(1, 2, 3) if m.group(1) else m.group(4, 5, 6)))
    try:
        datetime(y, mo, d)
    except ValueError:
        return None
    return y, mo, d


def current_version(model: str, catalogue: dict[str, int]) -> ListedVersion | None:
    """The version a request for ``model`` is served by now, by the module's rule (cases 1–4).

    Args:
        model: the registry entry's ``model`` (alias or dated snapshot).
        catalogue: ``{id: created}`` from :func:`list_models`.

    Returns None when neither ``model`` nor a dated snapshot of it is listed.
    """
    if _snapshot_date(model) is not None:
        return ListedVersion(model, catalogue[model]) if model in catalogue else None
    snapshots = [
        i
        for i in catalogue
        if i.startswith(model + "-") and _snapshot_date(i) is not None and _DATED.sub("", i) == model
    ]
    if snapshots:
        newest = max(snapshots, key=lambda i: _snapshot_date(i))
        return ListedVersion(newest, catalogue[newest])
    return ListedVersion(model, catalogue[model]) if model in catalogue else None


def version_change(
    reported: list[str] | set[str], evaluated_at: float, current: ListedVersion | None
) -> VersionChange | None:
    """Whether an evaluation that reported ``reported`` versions at ``evaluated_at`` (Unix seconds)
    is out of date against ``current`` (:func:`current_version`); None when it is not, or when
    there is nothing to judge (no reported version, or ``current`` unknown).

    >>> version_change(["gpt-x-2024-07-18"], 1.8e9, ListedVersion("gpt-x-2025-01-31", 1738281600)).reason
    'provider version changed: gpt-x-2024-07-18 → gpt-x-2025-01-31'
    """
    reported = sorted(set(reported))
    if not reported or current is None:
        return None
    before = ", ".join(reported)
    if is_dated_snapshot(current.id) and current.id not in reported:
        return VersionChange(before, current.id)
    if current.created > evaluated_at:
        when = datetime.fromtimestamp(current.created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return VersionChange(before, f"{current.id} (created {when})")
    return None


def list_models(
    provider: str, api_key: str, base_url: str | None = None, timeout_s: float = 10.0, max_models: int = 5000
) -> dict[str, int]:
    """``models.list`` of ``provider`` as ``{id: created}`` (Unix seconds, UTC).

    One SDK client per call, SDK retries off; ``timeout_s`` bounds the whole listing (every page),
    enforced by waiting on a worker thread (a listing still running after it is abandoned).

    Args:
        provider: ``"openai"`` (``base_url`` includes ``/v1``; None = ``https://api.openai.com/v1``)
            or ``"anthropic"`` (``base_url`` without ``/v1``; None = ``https://api.anthropic.com``).
        api_key: the secret key, handed to the SDK only.
        max_models: stop paginating after this many entries (a misbehaving endpoint cannot loop).

    Raises:
        ValueError: ``provider`` is not in :data:`POLLED_PROVIDERS`.
        VersionPollError: the listing failed or took longer than ``timeout_s``.
    """
    if provider not in POLLED_PROVIDERS:
        raise ValueError(f"models.list is polled for {list(POLLED_PROVIDERS)}, not {provider!r}")
    where = f"{provider} models.list at {base_url or 'the default endpoint'}"
    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["ok"] = _list(provider, api_key, base_url, timeout_s, max_models)
        except BaseException as exc:  # reported to the caller below
            box["error"] = exc

    worker = threading.Thread(target=work, name="metamorph-models-list", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise VersionPollError(f"{where}: no answer within {timeout_s:g} s")
    if "error" in box:
        exc = box["error"]
        text = " ".join(str(exc).split()).replace(api_key, "***") if api_key else str(exc)
        raise VersionPollError(f"{where} failed: {type(exc).__name__}: {text[:300]}") from None
    return box["ok"]  # type: ignore[return-value]


def _list(provider: str, api_key: str, base_url: str | None, timeout_s: float, max_models: int) -> dict[str, int]:
    out: dict[str, int] = {}
    if provider == "openai":
        import openai

        with openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s) as client:
            for m in client.models.list():
                out[m.id] = int(m.created)
                if len(out) >= max_models:
                    break
        return out
    import anthropic

    with anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s) as client:
        for m in client.models.list(limit=1000):
            created = m.created_at if m.created_at.tzinfo else m.created_at.replace(tzinfo=timezone.utc)
            out[m.id] = int(created.timestamp())
            if len(out) >= max_models:
                break
    return out
