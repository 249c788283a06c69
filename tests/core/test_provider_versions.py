"""The provider-version rule (metamorph.providers.versions) on hand-built catalogues, and
``models.list`` through the real openai / anthropic SDKs against the local HTTP stub."""

from __future__ import annotations

import time

import pytest

from metamorph.providers.versions import (
    ListedVersion,
    VersionPollError,
    current_version,
    is_dated_snapshot,
    list_models,
    version_change,
)
from tests.core.stub_http import Reply

KEY = "sk-versions-secret-4711"

CATALOGUE = {
    "gpt-x": 1_700_000_000,
    "gpt-x-2024-07-18": 1_721_260_800,
    "gpt-x-2025-01-31": 1_738_281_600,
    "gpt-x-mini-2026-02-01": 1_769_904_000,
    "claude-h-20241022": 1_729_555_200,
    "o9": 1_750_000_000,
}


def test_dated_snapshot_ids():
    assert [
        is_dated_snapshot(i)
        for i in (
            "gpt-x-2024-07-18",
            "claude-h-20241022",
            "gpt-x",
            "o9",
            "gpt-x-2024-13-01",
            "m-20241340",
            "gpt-x-0613",
        )
    ] == [True, True, False, False, False, False, False]


def test_current_version_cases():
    # 1. pinned snapshot: itself
    assert current_version("gpt-x-2024-07-18", CATALOGUE) == ListedVersion("gpt-x-2024-07-18", 1_721_260_800)
    assert current_version("gpt-x-2023-01-01", CATALOGUE) is None
    # 2. alias with snapshots: the latest date in the id (gpt-x-mini-2026-02-01 is another model's)
    assert current_version("gpt-x", CATALOGUE) == ListedVersion("gpt-x-2025-01-31", 1_738_281_600)
    assert current_version("claude-h", CATALOGUE) == ListedVersion("claude-h-20241022", 1_729_555_200)
    # 3. alias without snapshots: its own entry; 4. not listed
    assert current_version("o9", CATALOGUE) == ListedVersion("o9", 1_750_000_000)
    assert current_version("gone", CATALOGUE) is None


def test_version_change_rule():
    evaluated_at = 1_760_000_000.0  # 2025-10-09T08:53:20Z
    newer = ListedVersion("gpt-x-2025-01-31", 1_738_281_600)
    change = version_change(["gpt-x-2024-07-18"], evaluated_at, newer)
    assert (change.before, change.after) == ("gpt-x-2024-07-18", "gpt-x-2025-01-31")
    assert change.reason == "provider version changed: gpt-x-2024-07-18 → gpt-x-2025-01-31"
    # the same snapshot, published before the evaluation: unchanged; re-published after it: changed
    assert version_change(["gpt-x-2025-01-31"], evaluated_at, newer) is None
    republished = version_change(["gpt-x-2025-01-31"], evaluated_at, ListedVersion("gpt-x-2025-01-31", 1_760_000_060))
    assert republished.reason == (
        "provider version changed: gpt-x-2025-01-31 → gpt-x-2025-01-31 (created 2025-10-09T08:54:20Z)"
    )
    # an undated current id is never compared with the reported ids, only by its created time
    assert version_change(["o9-2025-04-16"], evaluated_at, ListedVersion("o9", 1_750_000_000)) is None
    assert version_change(["o9-2025-04-16"], evaluated_at, ListedVersion("o9", 1_760_000_001)).after == (
        "o9 (created 2025-10-09T08:53:21Z)"
    )
    # several reported versions: the current one among them is enough; nothing to judge without any
    assert version_change(["b-2025-01-31", "a-2024-07-18"], evaluated_at, ListedVersion("x-2026-01-01", 0)).before == (
        "a-2024-07-18, b-2025-01-31"
    )
    assert version_change([], evaluated_at, newer) is None
    assert version_change(["gpt-x-2024-07-18"], evaluated_at, None) is None


def openai_models(*entries):
    return Reply(
        200,
        {
            "object": "list",
            "data": [{"id": i, "object": "model", "created": c, "owned_by": "system"} for i, c in entries],
        },
    )


def test_list_models_openai_sends_the_key_to_v1_models(stub):
    stub.script("GET", "/v1/models", openai_models(("gpt-x", 5), ("gpt-x-2024-07-18", 7)))
    assert list_models("openai", KEY, f"{stub.url}/v1") == {"gpt-x": 5, "gpt-x-2024-07-18": 7}
    [req] = stub.requests
    assert (req.method, req.path, req.headers["authorization"]) == ("GET", "/v1/models", f"Bearer {KEY}")


def test_list_models_anthropic_follows_pages_and_converts_created_at(stub):
    def page(rec):
        if "after_id=claude-b" in rec.path:
            return Reply(
                200,
                {
                    "data": [
                        {
                            "type": "model",
                            "id": "claude-a-20240101",
                            "display_name": "A",
                            "created_at": "2024-01-01T00:00:00Z",
                            "lifecycle": "active",
                        }
                    ],
                    "has_more": False,
                    "first_id": "claude-a-20240101",
                    "last_id": "claude-a-20240101",
                },
            )
        return Reply(
            200,
            {
                "data": [
                    {
                        "type": "model",
                        "id": "claude-b",
                        "display_name": "B",
                        "created_at": "2025-10-09T08:53:20+00:00",
                        "lifecycle": "active",
                    }
                ],
                "has_more": True,
                "first_id": "claude-b",
                "last_id": "claude-b",
            },
        )

    stub.script("GET", "/v1/models", page)
    assert list_models("anthropic", KEY, stub.url) == {"claude-b": 1_760_000_000, "claude-a-20240101": 1_704_067_200}
    assert [r.path for r in stub.requests] == ["/v1/models?limit=1000", "/v1/models?limit=1000&after_id=claude-b"]
    assert [r.headers["authorization"] for r in stub.requests] == [f"Bearer {KEY}"] * 2


def test_list_models_failures_name_the_endpoint_never_the_key(stub):
    stub.script(
        "GET",
        "/v1/models",
        Reply(401, {"error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_request_error"}}),
    )
    with pytest.raises(VersionPollError) as err:
        list_models("openai", KEY, f"{stub.url}/v1")
    assert str(err.value).startswith(f"openai models.list at {stub.url}/v1 failed: AuthenticationError: ")
    assert KEY not in str(err.value) and "***" in str(err.value)

    stub.script("GET", "/v1/models", Reply(200, openai_models(("m", 1)).body, delay_s=3.0))
    start = time.monotonic()
    with pytest.raises(VersionPollError, match=r"no answer within 0\.5 s|timed out"):
        list_models("openai", KEY, f"{stub.url}/v1", timeout_s=0.5)
    assert time.monotonic() - start < 2.0

    with pytest.raises(ValueError, match="not 'llama_cpp'"):
        list_models("llama_cpp", KEY)
