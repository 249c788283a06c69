"""Prefix reuse (``params.prefix_reuse: true``) gives the completions computed without it,
byte for byte, whatever ran before: on both packaged models, every study's real prompts, with
each engine. With reuse on, the requests run in study order (consecutive prompts share their
system prompt, so the shared prefix is found in the KV cache); with reuse off, in reverse order
in a fresh worker (each prompt computed from nothing). Both engines reuse the KV state of a
prompt's leading segments (llama-cpp-python from memory, xllamacpp from its server's slot files)."""

import pytest

from metamorph.providers import engines
from metamorph.providers.base import GenerationRequest
from metamorph.providers.llama_cpp import LlamaCppProvider, gguf_path
from tests.core.test_local_engines import registry, texts, with_engine

pytestmark = pytest.mark.llm

#: completion budget of each call here (the identity holds token by token; a short reply suffices).
MAX_TOKENS = 24


def with_params(request: GenerationRequest, **params) -> GenerationRequest:
    """``request`` with ``params`` set (a ``None`` value removes the parameter)."""
    merged = {k: v for k, v in {**request.params, **params}.items() if v is not None}
    return GenerationRequest(
        request.provider, request.model, request.messages, merged, renderer_version=request.renderer_version
    )


def every_studys_requests(model_id: str, per_study: int = 2) -> list[GenerationRequest]:
    """The first ``per_study`` requests of each study's first generation step for registry entry
    ``model_id`` at the default options (what ``metamorph plan`` plans), ``max_tokens`` capped
    at :data:`MAX_TOKENS`."""
    from metamorph.study import studies

    spec = registry()[model_id]
    out = []
    for study in studies().values():
        first = study.cost_steps(spec, study.values())[0].requests()[:per_study]
        out += [
            with_params(r, max_tokens=min(MAX_TOKENS, int(r.params.get("max_tokens") or MAX_TOKENS))) for r in first
        ]
    return out


@pytest.mark.parametrize("engine", tuple(engines.ENGINES))
@pytest.mark.parametrize("model_id", ["smollm2", "gemma3-270m"])
def test_reuse_on_gives_the_completions_of_reuse_off_in_any_order(engine, model_id):
    spec = registry()[model_id]
    reqs = [with_engine(r, engine) for r in every_studys_requests(model_id)]
    assert len(reqs) == 8
    # the studies' prompts share a leading segment within a study (its system prompt)
    assert all(reqs[i].messages[0] == reqs[i + 1].messages[0] for i in range(0, 8, 2))
    path = gguf_path(spec.model)
    on = LlamaCppProvider(path, chat_format=spec.chat_format, engine=engine)
    try:
        # each request twice in a row: the second finds its whole prompt in the cache
        reused = texts(on.generate(with_params(r, prefix_reuse=True)) for r in reqs for _ in (0, 1))
    finally:
        on.close()
    off = LlamaCppProvider(path, chat_format=spec.chat_format, engine=engine)
    try:
        cold = texts(off.generate(with_params(r, prefix_reuse=False)) for r in reversed(reqs))[::-1]
    finally:
        off.close()
    assert all(t[0] for t in cold)
    same = [a == b for a, b in zip(reused[0::2], cold)] + [a == b for a, b in zip(reused[1::2], cold)]
    assert reused[0::2] == cold and reused[1::2] == cold, f"{sum(same)}/16 byte-identical"
