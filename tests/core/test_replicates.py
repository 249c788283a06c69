"""Replicates (metamorph.replicates): a seed per sampled replicate, one computation for a
deterministic request — the rules by hand, and what the real SDKs send to the local stub."""

import dataclasses
import hashlib
import json

import pytest

from metamorph.cache import GenerationCache
from metamorph.costplan import plan_requests
from metamorph.models import ModelSpec, parse_registry
from metamorph.errors import RegistryError
from metamorph.providers.anthropic_provider import AnthropicProvider
from metamorph.providers.base import GenerationRequest
from metamorph.providers.openai_provider import OpenAIProvider
from metamorph.replicates import computation, replicate_seed, request_identity, samples, seeded
from metamorph.runner import generation_frame, run_requests
from metamorph.studies.format_robustness.plan import plan_generations, plan_routing
from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, render
from metamorph.studies.format_robustness.sources import load_sources
from metamorph.studies.workflow_perturb.plan import judge_requests
from metamorph.studies.workflow_perturb.workflows import Workflow
from tests.core.stub_http import Reply, echo_chat

KEY = "sk-test-REPLICATES-SECRET"


def quiet(_msg: str) -> None:
    pass


MSG = ({"role": "user", "content": "q"},)


def rule(base: int, r: int, identity: str) -> int:
    """The documented rule, written out: sha256("<s>:<r>:<identity>"), first 8 hex digits, mod 2**31."""
    return int(hashlib.sha256(f"{base}:{r}:{identity}".encode()).hexdigest()[:8], 16) % 2**31


def test_replicate_seeds_follow_the_documented_rule():
    req = GenerationRequest("openai", "gpt-x", MSG, {"temperature": 0.7, "seed": 4}, repeat_index=2)
    # the identity leaves out the seed and the repeat index: what the replicates share
    material = {
        "base_url": None,
        "document": None,
        "ingestion": "inline",
        "messages": [dict(MSG[0])],
        "model": "gpt-x",
        "params": {"temperature": 0.7},
        "provider": "openai",
        "renderer_version": None,
    }
    identity = hashlib.sha256(json.dumps(material, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert request_identity(req) == identity == request_identity(dataclasses.replace(req, repeat_index=5))
    assert seeded(req).params == {"temperature": 0.7, "seed": rule(4, 2, identity)}
    assert replicate_seed(4, 2, identity) == rule(4, 2, identity)
    assert len({replicate_seed(0, r, identity) for r in range(1, 1001)}) == 1000
    with pytest.raises(ValueError):
        replicate_seed(0, 0, identity)


def test_what_samples_and_what_gets_a_replicate_seed():
    assert samples({}) and samples({"temperature": 0.7}) and not samples({"temperature": 0})
    assert not samples({"temperature": 0.7, "top_k": 1})
    greedy = GenerationRequest("openai", "gpt-x", MSG, {"temperature": 0.0, "seed": 4}, repeat_index=2)
    assert seeded(greedy) is greedy  # greedy: the base seed in every replicate
    unseeded = GenerationRequest("openai", "gpt-x", MSG, {"temperature": 0.7}, repeat_index=3)
    assert seeded(unseeded) is unseeded  # no seed: plain independent calls
    # two prompts of one repeat index draw from different random streams
    other = GenerationRequest(
        "openai", "gpt-x", ({"role": "user", "content": "r"},), {"temperature": 0.7, "seed": 4}, repeat_index=2
    )
    assert seeded(other).params["seed"] != seeded(dataclasses.replace(other, messages=MSG)).params["seed"]


def test_a_deterministic_replicate_is_computed_as_replicate_one():
    r3 = GenerationRequest(
        "llama_cpp", "m.gguf", ({"role": "user", "content": "q"},), {"temperature": 0.0}, repeat_index=3
    )
    assert computation(r3, True) == dataclasses.replace(r3, repeat_index=1)
    assert computation(r3, False) is r3


def _construct_requests(spec: ModelSpec, k: int, params: dict) -> list:
    xs = [x for _, x in load_sources(["construct"], limit=1)]
    docs = [render(x, f, check=True) for x in xs for f in DEFAULT_FORMATS]
    return plan_generations(xs, docs, spec, k=k, params=params)


def test_openai_sampled_repeats_send_their_own_seeds(stub, tmp_path):
    stub.route("POST", "/v1/chat/completions", echo_chat)
    spec = ModelSpec(id="gpt-x", provider="openai", model="gpt-x")
    planned = _construct_requests(spec, 3, {"temperature": 0.7, "seed": 11, "max_tokens": 8})
    provider = OpenAIProvider("openai", KEY, base_url=stub.url + "/v1")
    outs, stats = run_requests(
        [p.request for p in planned], provider, GenerationCache(tmp_path / "c.duckdb"), log=quiet
    )
    sent = {(r.json["messages"][-1]["content"], r.json["seed"]) for r in stub.requests_to("/v1/chat/completions")}
    # 1 instance x 4 formats x 3 repeats: each request its own seed by the rule
    assert sent == {
        (p.request.messages[-1]["content"], rule(11, p.repeat, request_identity(p.request))) for p in planned
    }
    assert len({seed for _, seed in sent}) == 12
    assert stats.calls == 12 and stats.shared == 0 and not any(o.shared for o in outs)


def test_anthropic_repeats_without_a_seed_are_independent_calls(stub, tmp_path):
    stub.route(
        "POST",
        "/v1/messages",
        lambda rec: Reply(
            200,
            {
                "id": "m",
                "type": "message",
                "role": "assistant",
                "model": "claude-x",
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 5, "output_tokens": 1},
            },
        ),
    )
    # the Messages API takes no seed: the registry unsets it (seed: null) and the repeats are k calls
    spec = ModelSpec(id="claude-x", provider="anthropic", model="claude-x", params={"seed": None, "temperature": None})
    planned = _construct_requests(spec, 2, {"max_tokens": 8})
    provider = AnthropicProvider(KEY, base_url=stub.url)
    _, stats = run_requests([p.request for p in planned], provider, GenerationCache(tmp_path / "c.duckdb"), log=quiet)
    bodies = [r.json for r in stub.requests_to("/v1/messages")]
    assert len(bodies) == 8 and stats.calls == 8
    assert not any("seed" in b for b in bodies)


def test_a_deterministic_endpoint_answers_the_replicates_with_one_call(stub, tmp_path):
    stub.route("POST", "/v1/chat/completions", echo_chat)
    spec = ModelSpec(id="srv", provider="openai_compatible", model="srv", base_url=stub.url + "/v1", deterministic=True)
    planned = _construct_requests(spec, 3, {"temperature": 0.0, "seed": 0, "max_tokens": 8})
    requests = [p.request for p in planned]
    plan = plan_requests(requests, spec, count=lambda r: 1, method="test")
    assert (plan.requests, plan.shared, plan.calls) == (12, 8, 4)
    provider = OpenAIProvider("openai_compatible", "none", base_url=spec.base_url, deterministic=True)
    outs, stats = run_requests(requests, provider, GenerationCache(tmp_path / "c.duckdb"), log=quiet)
    assert len(stub.requests_to("/v1/chat/completions")) == 4 and stats.calls == 4 and stats.shared == 8
    df = generation_frame([{"format": p.format, "repeat": p.repeat} for p in planned], outs)
    assert len(df) == 12  # one row per replicate
    per_format = df.groupby("format")["generation_key"].nunique()
    assert per_format.to_dict() == {f: 1 for f in DEFAULT_FORMATS}
    assert df.loc[df["repeat"] == 1, "shared_generation"].tolist() == [False] * 4
    assert df.loc[df["repeat"] > 1, "shared_generation"].tolist() == [True] * 8
    # the row keeps its own request (repeat_index 2, 3) while its key is repeat 1's
    assert '"repeat_index":3' in df.loc[df["repeat"] == 3, "request_json"].iloc[0]


def test_routed_reruns_of_a_deterministic_endpoint_are_the_original_calls(stub, tmp_path):
    stub.route("POST", "/v1/chat/completions", echo_chat)
    spec = ModelSpec(id="srv", provider="openai_compatible", model="srv", base_url=stub.url + "/v1", deterministic=True)
    xs = [x for _, x in load_sources(["construct"], limit=2)]
    docs = [render(x, f, check=True) for x in xs for f in DEFAULT_FORMATS]
    params = {"temperature": 0.0, "seed": 0, "max_tokens": 8}
    gen = plan_generations(xs, docs, spec, k=3, params=params)
    routed = plan_routing(xs, docs, spec, {("srv/inline", xs[0].dataset): "md"}, k=3, params=params)
    provider = OpenAIProvider("openai_compatible", "none", base_url=spec.base_url, deterministic=True)
    cache = GenerationCache(tmp_path / "c.duckdb")
    run_requests([p.request for p in gen], provider, cache, log=quiet)
    outs, stats = run_requests([p.request for p in routed], provider, cache, log=quiet)
    # 2 instances x 4 source formats x k = 3 routed rows, all served by the 2 original md calls
    assert len(outs) == 24 and stats.calls == 0 and len({o.key for o in outs}) == 2
    assert len(stub.requests_to("/v1/chat/completions")) == 8


def test_judge_calls_get_seeds_when_sampling_and_share_one_when_greedy():
    w = Workflow(workflow_id="g", task="t", nodes=("a", "b"), edges=(("START", "1"), ("1", "2"), ("2", "END")))
    sampled = judge_requests(w, w, "openai", "j", {"temperature": 0.7, "seed": 2, "max_tokens": 9})
    ident = request_identity(sampled[0])
    assert [r.params["seed"] for r in sampled] == [rule(2, i, ident) for i in (1, 2, 3)]
    greedy = judge_requests(w, w, "llama_cpp", "j.gguf", {"temperature": 0.0, "seed": 0, "max_tokens": 9})
    assert [r.params["seed"] for r in greedy] == [0, 0, 0]
    assert len({computation(r, True).cache_key() for r in greedy}) == 1


def test_registry_deterministic_is_an_api_setting_and_part_of_the_fingerprint():
    base = {"id": "srv", "provider": "openai_compatible", "model": "m", "base_url": "http://127.0.0.1:1/v1"}
    plain, declared = (
        parse_registry({"models": [base]})[0],
        parse_registry({"models": [{**base, "deterministic": True}]})[0],
    )
    assert (plain.deterministic, declared.deterministic) == (False, True)
    assert plain.fingerprint() != declared.fingerprint()
    with pytest.raises(RegistryError) as err:
        parse_registry({"models": [{"id": "l", "provider": "llama_cpp", "model": "x.gguf", "deterministic": True}]})
    assert str(err.value) == (
        "<registry>, row 1, field 'deterministic': deterministic is an API-provider setting (a "
        "llama_cpp model is deterministic exactly when its decoding is greedy or seeded)"
    )
    with pytest.raises(RegistryError, match="true or false"):
        parse_registry({"models": [{**base, "deterministic": "yes"}]})


def test_study_params_apply_in_their_study_only():
    spec = parse_registry(
        {
            "models": [
                {
                    "id": "m",
                    "provider": "llama_cpp",
                    "model": "x.gguf",
                    "params": {"max_tokens": 9},
                    "study_params": {"format_robustness": {"temperature": 0.7}},
                }
            ]
        }
    )[0]
    assert spec.params_for("format_robustness") == {"max_tokens": 9, "temperature": 0.7}
    assert spec.params_for("order_probe") == {"max_tokens": 9}
    with pytest.raises(RegistryError, match="study_params"):
        parse_registry(
            {
                "models": [
                    {
                        "id": "m",
                        "provider": "llama_cpp",
                        "model": "x.gguf",
                        "study_params": {"no_such_study": {"temperature": 0.7}},
                    }
                ]
            }
        )
    with pytest.raises(RegistryError, match="unknown decoding parameter"):
        parse_registry(
            {
                "models": [
                    {
                        "id": "m",
                        "provider": "llama_cpp",
                        "model": "x.gguf",
                        "study_params": {"format_robustness": {"temprature": 0.7}},
                    }
                ]
            }
        )


def test_sampled_routing_reruns_the_original_call_for_the_input_already_in_the_best_format(stub, tmp_path):
    """The routed slot j = 0 (the input already in the best format) is the original request, seed
    included, so the cache serves it; the other slots are new draws with seeds of their own."""
    spec = ModelSpec(id="gpt-x", provider="openai", model="gpt-x")
    xs = [x for _, x in load_sources(["construct"], limit=1)]
    docs = [render(x, f, check=True) for x in xs for f in DEFAULT_FORMATS]
    params = {"temperature": 0.7, "seed": 3, "max_tokens": 8}
    gen = plan_generations(xs, docs, spec, k=2, params=params)
    routed = plan_routing(xs, docs, spec, {("gpt-x/inline", xs[0].dataset): "md"}, k=2, params=params)
    originals = {p.request.cache_key() for p in gen if p.format == "md"}
    keys = [p.request.cache_key() for p in routed]
    assert [k in originals for k in keys] == [True, True] + [False] * 6  # j = 0 (md itself), r = 1, 2
    assert len(set(keys)) == 8 and {p.base_seed for p in gen + routed} == {3}
    assert len({p.request.params["seed"] for p in routed}) == 8


def test_routing_takes_the_runs_base_seed_not_a_replicates_seed():
    from metamorph.runner import Outcome
    from metamorph.providers.base import GenerationResult
    from metamorph.studies.format_robustness.plan import routing_params

    spec = ModelSpec(id="gpt-x", provider="openai", model="gpt-x", params={"max_tokens": 8})
    xs = [x for _, x in load_sources(["construct"], limit=1)]
    docs = [render(x, f, check=True) for x in xs for f in DEFAULT_FORMATS]
    gen = plan_generations(xs, docs, spec, k=2, params={"temperature": 0.7, "seed": 3})
    outs = [Outcome(p.request, p.request.cache_key(), GenerationResult("ok"), False) for p in gen]
    frame = generation_frame([{"repeat": p.repeat, "base_seed": p.base_seed} for p in gen], outs)
    assert all(p.request.params["seed"] != 3 for p in gen)  # every request carries a derived seed
    k, params = routing_params(frame, spec)
    # the registry's max_tokens is left out (plan_routing merges it again); the seed is the base one
    assert (k, params) == (2, {"temperature": 0.7, "seed": 3})
