"""Replicates on the real packaged models: independent seeded draws when sampling, one
computation per distinct request when greedy (metamorph.replicates, the runner, the format study)."""

import pytest

from metamorph.cache import GenerationCache
from metamorph.models import load_registry
from metamorph.providers.base import GenerationRequest
from metamorph.providers.llama_cpp import GEMMA3_FILE, LlamaCppProvider, gguf_path
from metamorph.runner import generation_frame, run_requests
from metamorph.studies.format_robustness.plan import plan_generations, plan_routing
from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, render
from metamorph.studies.format_robustness.sources import load_sources
from tests.conftest import REPO

pytestmark = pytest.mark.llm

REGISTRY = {m.id: m for m in load_registry(REPO / "config" / "models.yaml")}


class Counting:
    """The real provider, with the calls it receives counted (what reaches llama.cpp)."""

    def __init__(self, inner):
        self.inner, self.kind, self.max_concurrency, self.calls = inner, inner.kind, inner.max_concurrency, 0

    def is_deterministic(self, request):
        return self.inner.is_deterministic(request)

    def generate(self, request):
        self.calls += 1
        return self.inner.generate(request)


@pytest.fixture(scope="module")
def smollm2():
    return LlamaCppProvider(n_ctx=2048)


def quiet(_msg):
    pass


def _one_instance():
    xs = [x for _, x in load_sources(["construct"], limit=1)]
    return xs, [render(x, f, check=True) for x in xs for f in DEFAULT_FORMATS]


@pytest.mark.parametrize("model", ["smollm2", "gemma3-270m"])
def test_greedy_and_seeded_requests_do_not_depend_on_what_ran_before(model):
    """The provider's determinism declaration, proven on every packaged model: a greedy and a
    seeded sampled request give the same bytes alone and after another request."""
    spec = REGISTRY[model]
    path = gguf_path(GEMMA3_FILE) if spec.model == GEMMA3_FILE else None
    provider = LlamaCppProvider(path, n_ctx=512, chat_format=spec.chat_format)
    chat = {"chat_format": spec.chat_format} if spec.chat_format else {}
    msgs = ({"role": "user", "content": "Name three colours."},)
    other = ({"role": "user", "content": "Count from one to five in words."},)
    for params in ({"temperature": 0.0, "max_tokens": 24}, {"temperature": 0.9, "seed": 1_000_003, "max_tokens": 24}):
        req = GenerationRequest("llama_cpp", spec.model, msgs, {**params, **chat})
        assert provider.is_deterministic(req)
        first = provider.generate(req).text
        provider.generate(GenerationRequest("llama_cpp", spec.model, other, {**params, **chat, "seed": 7}))
        assert first and provider.generate(req).text == first
    assert not provider.is_deterministic(GenerationRequest("llama_cpp", spec.model, msgs, {"temperature": 0.9, **chat}))


def test_sampled_repeats_are_distinct_draws_that_a_rerun_reproduces(smollm2, tmp_path):
    spec = REGISTRY["smollm2"]  # samples in the format study (study_params temperature 0.7)
    xs, docs = _one_instance()
    planned = plan_generations(xs, docs, spec, k=3, params={"max_tokens": 96})
    assert {p.request.params["temperature"] for p in planned} == {0.7}
    assert len({p.request.params["seed"] for p in planned}) == 12  # a seed per request (metamorph.replicates.seeded)
    requests = [p.request for p in planned]
    counting = Counting(smollm2)
    outs, stats = run_requests(requests, counting, GenerationCache(tmp_path / "a.duckdb"), log=quiet)
    assert counting.calls == 12 and stats.shared == 0
    texts = {}
    for p, o in zip(planned, outs):
        texts.setdefault(p.format, []).append(o.result.text)
    assert any(len(set(t)) > 1 for t in texts.values()), texts  # the repeats differ in some format
    again, _ = run_requests(requests, Counting(smollm2), GenerationCache(tmp_path / "b.duckdb"), log=quiet)
    assert [o.result.text for o in again] == [o.result.text for o in outs]  # byte for byte, from a fresh cache


def test_greedy_repeats_and_routed_reruns_are_one_call_per_distinct_computation(smollm2, tmp_path):
    spec = REGISTRY["smollm2-greedy"]
    xs, docs = _one_instance()
    params = {"max_tokens": 48}
    gen = plan_generations(xs, docs, spec, k=3, params=params)
    routed = plan_routing(xs, docs, spec, {(spec.workflow_id("inline"), xs[0].dataset): "json"}, k=3, params=params)
    counting = Counting(smollm2)
    cache = GenerationCache(tmp_path / "c.duckdb")
    outs, stats = run_requests([p.request for p in gen], counting, cache, log=quiet)
    assert (counting.calls, stats.calls, stats.shared) == (4, 4, 8)  # 4 formats, k = 3 repeats each
    routed_outs, routed_stats = run_requests([p.request for p in routed], counting, cache, log=quiet)
    assert counting.calls == 4 and routed_stats.calls == 0  # every routed input is the original json call
    df = generation_frame([{"format": p.format, "repeat": p.repeat} for p in gen], outs)
    rf = generation_frame([{"format": p.format, "repeat": p.repeat} for p in routed], routed_outs)
    assert len(df) == 12 and len(rf) == 12  # one row per replicate
    assert df.groupby("format")["generation_key"].nunique().to_dict() == {f: 1 for f in DEFAULT_FORMATS}
    json_key = df.loc[df["format"] == "json", "generation_key"].iloc[0]
    assert set(rf["generation_key"]) == {json_key}
    assert cache.get_many(list(df["generation_key"].unique())).keys() == set(df["generation_key"])
