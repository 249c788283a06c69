"""Requests of the format study, the model registry, and the metric-input assembly."""

import json

import pandas as pd
import pytest

from metamorph.replicates import replicate_seed, request_identity

from metamorph.studies.format_robustness.sources import construct_dataset
from metamorph.errors import ConfigError
from metamorph.studies.format_robustness.plan import (
    DOC_BEGIN,
    DOC_END,
    PROMPT_VERSION,
    generation_outcomes,
    metric_input,
    plan_generations,
    sensitive_frame,
)
from metamorph.models import ModelSpec, load_registry, parse_registry
from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, render

LOCAL = ModelSpec(id="local", provider="llama_cpp", model="m.gguf")
OPENAI = ModelSpec(
    id="gpt",
    provider="openai",
    model="gpt-x",
    ingestion=("inline", "openai_file"),
    api_key_env="OPENAI_API_KEY",
    params={"temperature": None, "top_p": 0},
)


def plan(model=LOCAL, k=3, params=None):
    xs = construct_dataset(2, seed=0)
    docs = [render(x, f) for x in xs for f in DEFAULT_FORMATS]
    return xs, plan_generations(xs, docs, model, k=k, params=params)


def test_plan_counts_and_lineage_ids():
    xs, planned = plan(k=3)
    assert len(planned) == 2 * 4 * 3
    assert {p.workflow_id for p in planned} == {"local/inline"}
    assert [p.repeat for p in planned[:3]] == [1, 2, 3]
    assert len({p.request.cache_key() for p in planned}) == 24  # the repeat index is in the key


def test_only_the_document_differs_across_formats():
    xs, planned = plan(k=1)
    first = [p for p in planned if p.instance_id == xs[0].instance_id]
    systems = {p.request.messages[0]["content"] for p in first}
    heads = {p.request.messages[1]["content"].split(DOC_BEGIN)[0] for p in first}
    assert len(systems) == 1 and len(heads) == 1
    head = heads.pop()
    assert head.startswith(xs[0].task_prompt) and '"decision"' in head
    for p in first:
        body = p.request.messages[1]["content"].split(DOC_BEGIN)[1]
        assert body == "\n" + render(xs[0], p.format).text + DOC_END
        assert xs[0].task_prompt not in body  # instruction isolation


def test_file_ingestion_attaches_the_document_and_keeps_it_out_of_the_prompt():
    xs, planned = plan(model=OPENAI, k=1)
    files = [p for p in planned if p.request.ingestion == "openai_file"]
    assert len(files) == 8
    p = files[0]
    assert p.request.document.content == render(xs[0], p.format).content
    assert p.request.document.media_type == render(xs[0], p.format).media_type
    assert DOC_BEGIN not in p.request.messages[1]["content"]


def test_param_precedence_and_null_unsets():
    _, planned = plan(k=1, params={"temperature": 0.7, "max_tokens": 64})
    # sampled: the base seed 0 becomes the request's own (metamorph.replicates.seeded)
    req = planned[0].request
    assert req.params == {"temperature": 0.7, "max_tokens": 64, "seed": replicate_seed(0, 1, request_identity(req))}
    assert planned[0].base_seed == 0
    _, planned = plan(model=OPENAI, k=1, params={"temperature": 0.7})
    # null removed, 0 kept; without a temperature the provider's default samples, so the seed is derived
    req = planned[0].request
    assert req.params == {"max_tokens": 512, "seed": replicate_seed(0, 1, request_identity(req)), "top_p": 0}


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="k"):
        plan(k=0)


def test_registry_parses_and_rejects_bad_entries(tmp_path):
    good = parse_registry({"models": [{"id": "a", "provider": "openai", "model": "gpt"}]})
    assert good[0].api_key_env == "OPENAI_API_KEY" and good[0].ingestion == ("inline",)
    bad = [
        ({"models": [{"id": "A B", "provider": "openai", "model": "x"}]}, "partition key"),
        ({"models": [{"id": "a", "provider": "nope", "model": "x"}]}, "provider 'nope'"),
        (
            {"models": [{"id": "a", "provider": "llama_cpp", "model": "x", "ingestion": ["openai_file"]}]},
            "not available for provider llama_cpp",
        ),
        ({"models": [{"id": "a", "provider": "openai_compatible", "model": "x"}]}, "needs base_url"),
        ({"models": [{"id": "a", "provider": "openai", "model": "x", "api_key_env": "sk-123"}]}, "variable NAME"),
        ({"models": [{"id": "a", "provider": "openai", "model": "x"}] * 2}, "duplicate model id"),
        ({"models": [{"id": "a", "provider": "openai", "model": "x", "apikey": "s"}]}, "unknown key"),
    ]
    for data, msg in bad:
        with pytest.raises(ConfigError, match=msg):
            parse_registry(data, "reg.yaml")
    with pytest.raises(ConfigError, match="does not exist"):
        load_registry(tmp_path / "none.yaml")


def test_the_shipped_registries_load():
    assert [m.id for m in load_registry("config/models.yaml")] == [
        "smollm2",
        "smollm2-greedy",
        "gemma3-270m",
    ]
    assert len(load_registry("config/models.example-apis.yaml")) == 4


def test_fingerprint_changes_with_the_entry():
    a = ModelSpec(id="a", provider="openai", model="gpt-x")
    b = ModelSpec(id="a", provider="openai", model="gpt-x-2026-01-01")
    assert a.fingerprint() != b.fingerprint() and a.fingerprint() == ModelSpec("a", "openai", "gpt-x").fingerprint()


def test_generation_outcomes_unions_item_categories():
    dec = pd.DataFrame(
        [
            dict(
                model_id="m",
                workflow_id="m/inline",
                dataset="d",
                instance_id="i",
                format="txt",
                repeat=1,
                generation_key="k1",
                decision="yes",
                gold=None,
                is_correct=None,
                favorable=True,
                parse_status="ok",
                parse_reason="ok",
            ),
            dict(
                model_id="m",
                workflow_id="m/inline",
                dataset="d",
                instance_id="i",
                format="md",
                repeat=1,
                generation_key="k2",
                decision=None,
                gold=None,
                is_correct=None,
                favorable=None,
                parse_status="unparseable",
                parse_reason="call_error",
            ),
        ]
    )
    ev = pd.DataFrame({"generation_key": ["k1", "k1", "k1"], "categories_json": ['["age"]', '["income","age"]', "[]"]})
    out = generation_outcomes(dec, ev)
    assert out["categories_json"].tolist() == ['["age", "income"]', "[]"]
    gen = metric_input(out)
    assert gen["categories"].tolist() == [["age", "income"], []]
    assert gen["decision"].tolist() == ["yes", None]
    assert out["call_error"].tolist() == [False, True]
    with pytest.raises(ValueError, match="not in extracted_decisions"):
        generation_outcomes(dec, pd.DataFrame({"generation_key": ["zz"], "categories_json": ["[]"]}))


def test_sensitive_frame_is_long():
    src = pd.DataFrame(
        {"dataset": ["d"], "instance_id": ["i"], "sensitive_json": [json.dumps({"sex": "female", "age_group": "<45"})]}
    )
    assert sensitive_frame(src).values.tolist() == [["d", "i", "sex", "female"], ["d", "i", "age_group", "<45"]]


def test_renderer_version_and_prompt_are_part_of_the_cache_key():
    from dataclasses import replace

    xs = construct_dataset(n=1, seed=0)
    doc = render(xs[0], "md")
    base = plan_generations(xs, [doc], OPENAI, k=1)
    bumped = plan_generations(xs, [replace(doc, renderer_version="md-99")], OPENAI, k=1)
    reworded = plan_generations([replace(xs[0], task_prompt=xs[0].task_prompt + " Be brief.")], [doc], OPENAI, k=1)
    for a, b, c in zip(base, bumped, reworded):
        assert len({a.request.cache_key(), b.request.cache_key(), c.request.cache_key()}) == 3
        assert json.loads(a.request.to_json())["renderer_version"] == f"md-2+{PROMPT_VERSION}" == "md-2+p2"
