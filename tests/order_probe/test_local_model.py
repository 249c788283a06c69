"""One real call of the local model (SmolLM2-135M through llama.cpp) through the study's own
plan → runner → cache → parser path; the reply is whatever the model says, so the test asserts
the contract of the scored row, not a recovery."""

from __future__ import annotations

import pytest

from metamorph.cache import GenerationCache
from metamorph.models import load_registry
from metamorph.runner import generation_frame, run_requests
from metamorph.studies.order_probe import plan as op
from metamorph.studies.order_probe.schemas import OrderGenerations, ScoredReplies
from metamorph.studies.order_probe.sources import OrderItem
from metamorph.schemas import validate_frame


@pytest.mark.llm
def test_one_few_shot_call_is_cached_parsed_and_scored(tmp_path):
    from resources.llm import build_provider

    x = OrderItem("t-1", "zh_cn", "针头线脑", ("比喻细微的事物",), "Subject-Predicate", None, "test")
    inputs = op.scrambled_inputs([x])
    prompts = op.prompts_frame(inputs[inputs["pattern"] == "ABDC"], ["few_shot"])
    spec = load_registry("config/models.yaml")[0]
    planned = op.plan_generations(prompts, spec)
    cache = GenerationCache(tmp_path / "cache.duckdb")
    outcomes, stats = run_requests([p.request for p in planned], build_provider(spec), cache, log=lambda m: None)
    assert stats.calls == 1 and outcomes[0].result.error is None
    gens = generation_frame(
        [
            {
                "model_id": p.model_id,
                "setting": p.setting,
                "item_id": p.item_id,
                "language": p.language,
                "pattern": p.pattern,
                "input_kind": p.input_kind,
            }
            for p in planned
        ],
        outcomes,
    )
    validate_frame(OrderGenerations, gens)
    assert outcomes[0].result.completion_tokens <= op.MAX_TOKENS["few_shot"] + 1
    scored = validate_frame(ScoredReplies, op.score_generations(gens, inputs, [x]))
    r = scored.iloc[0]
    assert r["scrambled"] == "针头脑线"
    assert (r["expression"] is None) == (not r["parse_ok"]) and (len(r["expression"]) == 4 if r["parse_ok"] else True)
    assert r["correct"] == (r["expression"] == "针头线脑")
    again, stats2 = run_requests([p.request for p in planned], build_provider(spec), cache, log=lambda m: None)
    assert stats2.cache_hits == 1 and again[0].result.text == outcomes[0].result.text
