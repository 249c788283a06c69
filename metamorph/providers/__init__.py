"""LLM provider adapters, all implementing :class:`metamorph.providers.base.Provider`.

* :mod:`metamorph.providers.base` — request/result records, ``ProviderError``, the protocol.
* :mod:`metamorph.providers.retry` — ``RetryPolicy`` / ``call_with_retries`` (the only retry layer).
* :mod:`metamorph.providers.openai_provider` — OpenAI and OpenAI-compatible servers.
* :mod:`metamorph.providers.anthropic_provider` — Anthropic Messages API.
* :mod:`metamorph.providers.llama_cpp` — local GGUF models (imported on demand only: it needs
  the optional ``llama-cpp-python``).

Import the adapter modules directly; this package imports nothing so that importing
``metamorph.providers.base`` stays cheap and needs no SDK.
"""

__all__: list[str] = []
