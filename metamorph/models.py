"""The model registry: which models the studies evaluate, one dynamic partition each.

The registry is a YAML file (default ``config/models.yaml``)::

    models:
      - id: smollm2-135m-instruct        # the partition key: [a-z0-9._-]+
        provider: llama_cpp              # llama_cpp | openai | anthropic | openai_compatible
        model: SmolLM2-135M-Instruct.Q4_1.gguf
        ingestion: [inline]              # document-format study ingestion paths
        status: approved                 # approved (the baseline of upgrade verdicts) | candidate
      - id: gemma3-270m
        provider: llama_cpp
        model: gemma-3-270m-q4_k_m.gguf
        status: candidate
        params:
          chat_format: gemma             # llama_cpp only: the llama.cpp chat format (file has no template)
      - id: gpt-4o-mini
        provider: openai
        model: gpt-4o-mini
        ingestion: [inline, openai_file]
        api_key_env: OPENAI_API_KEY      # the NAME of the variable; the key itself never appears
      - id: qwen-long
        provider: openai_compatible
        base_url: https://dashscope.example/compatible-mode/v1
        model: qwen-long
        api_key_env: DASHSCOPE_API_KEY
        max_concurrency: 2

A *workflow* of the document-format study is a model with one ingestion path
(``<model id>/<ingestion>``). Each entry's :meth:`ModelSpec.fingerprint` lets the registry
sensor notice a changed entry (e.g. a new model snapshot) and re-evaluate that partition.

``status`` says which entry upgrade verdicts compare against: the one ``approved`` entry is the
baseline, ``candidate`` entries (the default) are compared with it
(:func:`approved_baseline`, :mod:`metamorph.comparison`). Promoting a candidate changes no
output, so ``status`` is not part of the fingerprint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from metamorph.errors import ConfigError
from metamorph.providers.base import INGESTION_PATHS, canonical_json, sha256_hex

PROVIDERS = ("llama_cpp", "openai", "anthropic", "openai_compatible")
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,79}$")
_DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
STATUSES = ("approved", "candidate")
_INGESTION_OK = {
    "llama_cpp": {"inline"},
    "openai": {"inline", "openai_file"},
    "anthropic": {"inline", "anthropic_document"},
    "openai_compatible": {"inline"},
}


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry. ``params`` are default decoding parameters for every study (for
    llama_cpp also ``chat_format``); ``status`` is ``approved`` or ``candidate``."""

    id: str
    provider: str
    model: str
    ingestion: tuple[str, ...] = ("inline",)
    base_url: str | None = None
    api_key_env: str | None = None
    max_concurrency: int = 4
    params: dict[str, Any] = field(default_factory=dict)
    status: str = "candidate"

    @property
    def chat_format(self) -> str | None:
        """The llama.cpp chat format of a llama_cpp entry (``params.chat_format``), else None."""
        return self.params.get("chat_format")

    def fingerprint(self) -> str:
        """sha256 of the entry's canonical JSON (changes when any field that shapes outputs
        changes; ``status`` and ``max_concurrency`` do not)."""
        return sha256_hex(canonical_json({
            "id": self.id, "provider": self.provider, "model": self.model, "ingestion": list(self.ingestion),
            "base_url": self.base_url, "api_key_env": self.api_key_env, "params": self.params,
        }).encode())

    def workflow_id(self, ingestion: str) -> str:
        return f"{self.id}/{ingestion}"


def parse_registry(data: Any, source: str = "<registry>") -> list[ModelSpec]:
    """Validate a parsed registry document; raises :class:`ConfigError` naming the entry and key."""
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise ConfigError(f"{source}: expected a mapping with a 'models' list")
    out: list[ModelSpec] = []
    for i, e in enumerate(data["models"], start=1):
        where = f"{source}: models[{i}]"
        if not isinstance(e, dict):
            raise ConfigError(f"{where}: an entry must be a mapping")
        unknown = set(e) - {"id", "provider", "model", "ingestion", "base_url", "api_key_env", "max_concurrency",
                            "params", "status"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}")
        for k in ("id", "provider", "model"):
            if not e.get(k):
                raise ConfigError(f"{where}: '{k}' is required")
        if not _ID.match(str(e["id"])):
            raise ConfigError(f"{where}: id {e['id']!r} must match {_ID.pattern} (it is a partition key)")
        if e["provider"] not in PROVIDERS:
            raise ConfigError(f"{where}: provider {e['provider']!r} not in {list(PROVIDERS)}")
        ingestion = tuple(e.get("ingestion") or ["inline"])
        bad = [p for p in ingestion if p not in INGESTION_PATHS or p not in _INGESTION_OK[e["provider"]]]
        if bad:
            raise ConfigError(f"{where}: ingestion {bad} not available for provider {e['provider']}")
        if e["provider"] == "openai_compatible" and not e.get("base_url"):
            raise ConfigError(f"{where}: openai_compatible needs base_url")
        status = e.get("status", "candidate")
        if status not in STATUSES:
            raise ConfigError(f"{where}: status {status!r} not in {list(STATUSES)}")
        params = e.get("params") or {}
        if not isinstance(params, dict):
            raise ConfigError(f"{where}: params must be a mapping")
        if "chat_format" in params and (e["provider"] != "llama_cpp" or not isinstance(params["chat_format"], str)):
            raise ConfigError(f"{where}: params.chat_format is a llama_cpp setting (a llama.cpp chat format name)")
        key_env = e.get("api_key_env") or _DEFAULT_KEY_ENV.get(e["provider"])
        if key_env is not None and not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key_env):
            raise ConfigError(f"{where}: api_key_env must be an environment variable NAME, e.g. OPENAI_API_KEY")
        out.append(ModelSpec(id=str(e["id"]), provider=e["provider"], model=str(e["model"]), ingestion=ingestion,
                             base_url=e.get("base_url"), api_key_env=key_env,
                             max_concurrency=int(e.get("max_concurrency", 1 if e["provider"] == "llama_cpp" else 4)),
                             params=dict(params), status=status))
    ids = [m.id for m in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ConfigError(f"{source}: duplicate model id(s) {dup}")
    return out


def approved_baseline(models: list[ModelSpec]) -> ModelSpec:
    """The registry's one ``approved`` entry: the baseline candidates are compared with.

    Raises :class:`ConfigError` when no entry or more than one entry is approved.
    """
    approved = [m for m in models if m.status == "approved"]
    if len(approved) != 1:
        raise ConfigError(f"upgrade verdicts need exactly one registry entry with status 'approved'; found "
                          f"{[m.id for m in approved] or 'none'}")
    return approved[0]


def load_registry(path: str | Path) -> list[ModelSpec]:
    """Read and validate the registry YAML at ``path`` (raises :class:`ConfigError`)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"model registry {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
    return parse_registry(data, str(p))
