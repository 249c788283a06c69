"""Shared fixtures. Real samples are read by path from ../shared (never copied into the repo)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.core.stub_http import StubServer

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
SHARED_DATASETS = Path(os.environ.get("METAMORPH_SHARED", REPO.parent / "shared")) / "datasets"


def shared_sample(name: str) -> Path:
    """Path of ``../shared/datasets/<name>/sample.jsonl``; skips the test when it is absent."""
    p = SHARED_DATASETS / name / "sample.jsonl"
    if not p.exists():
        pytest.skip(f"shared sample {p} not present")
    return p


@pytest.fixture
def metamorph_home(tmp_path, monkeypatch):
    """A fresh METAMORPH_HOME (warehouse + cache) for one test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("METAMORPH_HOME", str(home))
    return home


@pytest.fixture
def clean_proxy_env(monkeypatch):
    """No proxy or provider env vars may redirect the SDKs away from the local stub."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "ANTHROPIC_BASE_URL",
                "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def stub(clean_proxy_env):
    """A running :class:`tests.stub_http.StubServer` on 127.0.0.1 (closed after the test)."""
    server = StubServer()
    yield server
    server.close()




@pytest.fixture(autouse=True)
def _no_stale_defs_state_storage():
    """dagster 1.13.27 leaves a closed test instance's DefsStateStorage in a context variable; a
    later ``materialize`` without an instance then fails with "undefined DagsterInstance weakref"."""
    from dagster._core.storage.defs_state import base

    base._current_storage.set(None)
    yield
    base._current_storage.set(None)
