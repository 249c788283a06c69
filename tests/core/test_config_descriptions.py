"""Every launchpad config field that a check restricts says in its description which values it
takes (and what a sentinel such as ``limit: -1`` means), so the user reads the rule before Launch,
not only in the error after it. Dagster's launchpad cannot show a range or a file check as a
config-schema error (its schema has no ranges; the checks run in the code server), so the
description is where the rule is seen first."""

from __future__ import annotations

import annotated_types as at
import pytest

from pipelines.definitions import defs
from pipelines.inputs import config_class

#: (op, field) of every config field with a validator (an option's check, assets._common.study_config) or a pydantic
#: bound -> the words its description must hold
RULES = {
    ("format_robustness__model_comparison", "alpha"): ["0 < alpha < 1"],
    ("format_robustness__model_comparison", "n_resamples"): ["N ≥ 100"],
    ("format_robustness__model_comparison", "power"): ["0 < power < 1"],
    ("format_robustness__rendered_documents", "formats"): [
        "txt, md, json, csv (default), and html, yaml, pdf, docx, xlsx"
    ],
    ("format_robustness__routed_generations", "budget_usd"): ["USD ≥ 0", "-1 = no budget"],
    ("format_robustness__routing_choice_per_model", "calibration_fraction"): ["0 < fraction < 1"],
    ("format_robustness__source_instances", "limit"): ["N ≥ 1", "-1 = every row"],
    ("format_robustness__source_instances", "sample_seed"): ["0 to 2147483647", "null = the first `limit` rows"],
    ("format_robustness__workflow_generations", "budget_usd"): ["USD ≥ 0", "-1 = no budget"],
    ("format_robustness__workflow_generations", "k"): ["1 to 100"],
    ("format_robustness__workflow_generations", "max_tokens"): ["N ≥ 1"],
    ("order_probe__model_comparison", "alpha"): ["0 < alpha < 1"],
    ("order_probe__model_comparison", "n_resamples"): ["N ≥ 100"],
    ("order_probe__model_comparison", "power"): ["0 < power < 1"],
    ("order_probe__order_generations", "budget_usd"): ["USD ≥ 0", "-1 = no budget"],
    ("order_probe__order_generations", "max_tokens"): ["N ≥ 1", "0 = the per-setting budgets"],
    ("order_probe__order_items", "limit"): ["N ≥ 1", "-1 = every item"],
    ("order_probe__order_prompts", "settings"): ["one or more of zero_shot, cot, few_shot"],
    ("order_probe__semantic_scores", "bertscore_num_layers"): ["0 = none"],
    ("workflow_perturb__goldens", "limit"): ["N ≥ 1", "-1 = every row"],
    ("workflow_perturb__judge_scores", "budget_usd"): ["USD ≥ 0", "-1 = no budget"],
    ("workflow_perturb__judge_scores", "max_tokens"): ["N ≥ 8"],
    ("workflow_perturb__judge_scores", "n_variants"): ["N ≥ 1"],
    ("workflow_perturb__perturbations_llm", "budget_usd"): ["USD ≥ 0", "-1 = no budget"],
    ("workflow_perturb__perturbations_llm", "max_attempts"): ["N ≥ 1"],
    ("workflow_perturb__perturbations_llm", "max_tokens"): ["N ≥ 16"],
    ("workflow_perturb__perturbations_llm", "n_goldens"): ["N ≥ 1"],
    ("workflow_perturb__model_comparison", "alpha"): ["0 < alpha < 1"],
    ("workflow_perturb__model_comparison", "n_resamples"): ["N ≥ 100"],
    ("workflow_perturb__model_comparison", "power"): ["0 < power < 1"],
    ("workflow_perturb__threshold_recalibration", "percentile"): ["0 to 50"],
    ("wrapper_sensitivity__model_comparison", "alpha"): ["0 < alpha < 1"],
    ("wrapper_sensitivity__model_comparison", "n_resamples"): ["N ≥ 100"],
    ("wrapper_sensitivity__model_comparison", "power"): ["0 < power < 1"],
    ("wrapper_sensitivity__qa_items", "limit"): ["N ≥ 1", "-1 = every item"],
    ("wrapper_sensitivity__wrapper_generations", "budget_usd"): ["USD ≥ 0", "-1 = no budget"],
    ("wrapper_sensitivity__wrapper_generations", "max_tokens"): ["N ≥ 1"],
    ("wrapper_sensitivity__wrapper_generations", "seeds"): ["each 0 to 2147483647"],
}


def _config_classes() -> dict:
    """op name -> its pythonic config class, over every job of the definitions."""
    out = {}
    for job in defs.get_repository_def().get_all_jobs():
        for node in job.graph.node_defs:
            cls = config_class(node) if hasattr(node, "compute_fn") else None
            if cls is not None:
                out[node.name] = cls
    return out


CLASSES = _config_classes()


def _restricted(cls) -> set[str]:
    checked = {f for d in cls.__pydantic_decorators__.field_validators.values() for f in d.info.fields}
    bounded = {
        n for n, f in cls.model_fields.items() if any(isinstance(m, (at.Ge, at.Gt, at.Le, at.Lt)) for m in f.metadata)
    }
    return checked | bounded


def test_every_restricted_field_is_listed():
    assert {(op, f) for op, cls in CLASSES.items() for f in _restricted(cls)} == set(RULES)


@pytest.mark.parametrize("op, field", sorted(RULES), ids=[f"{o}.{f}" for o, f in sorted(RULES)])
def test_the_description_states_the_values_the_field_takes(op, field):
    description = CLASSES[op].model_fields[field].description
    assert [w for w in RULES[(op, field)] if w not in description] == [], description


def test_the_launchpad_shows_those_descriptions():
    """The inputs jobs' config mapping (pipelines.inputs) keeps each field's description in the
    schema the launchpad reads."""
    job = defs.resolve_job_def("format_robustness_inputs_job")
    fields = job.run_config_schema.config_type.fields["ops"].config_type.fields
    limit = fields["format_robustness__source_instances"].config_type.fields["config"].config_type.fields["limit"]
    assert limit.description == CLASSES["format_robustness__source_instances"].model_fields["limit"].description
    assert "-1 = every row" in limit.description
