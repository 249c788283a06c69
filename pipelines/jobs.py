"""Jobs: per study, one job for its unpartitioned inputs and one per-model job.

* ``<study>_inputs_job`` — the study's source items and their surface forms (unpartitioned);
* ``<study>_model_job`` — everything downstream for ONE model partition (generations, extraction)
  plus the cross-model metric tables (and the upgrade verdicts ``model_comparison``), which re-read
  all partitions. Sensors and schedules launch the model jobs per model;
* ``model_upgrades_job`` — the cross-study robustness report card.
"""

import dagster as dg

#: study group -> its unpartitioned input assets (names within the group)
STUDY_INPUTS = {
    "format_robustness": ["source_instances", "rendered_documents"],
    "wrapper_sensitivity": ["qa_items", "wrapped_prompts"],
    "workflow_perturb": [
        "goldens",
        "perturbations",
        "perturbation_scores",
        "severity_table",
        "sensitivity_matrix",
        "strata_table",
        "threshold_recalibration",
        "firing_matrix",
    ],
    "order_probe": ["order_items", "scrambled_inputs", "order_prompts"],
}


def input_selection(study: str) -> dg.AssetSelection:
    return dg.AssetSelection.assets(*[[study, name] for name in STUDY_INPUTS[study]])


def _inputs_job(study: str):
    import importlib

    from pipelines.inputs import inputs_config

    module = importlib.import_module(f"assets.{study}")
    return dg.define_asset_job(
        f"{study}_inputs_job",
        selection=input_selection(study),
        config=inputs_config(study, [getattr(module, name) for name in STUDY_INPUTS[study]]),
        description=f"Load the {study} study's sources and render their surface forms. The config is checked "
        "(sources loaded, values in range) when the run is launched: a bad value fails the launch "
        "with one line, no run is created.",
    )


#: The partition dialog of Dagster 1.13's UI opens with no partition selected
#: (LaunchAssetChoosePartitionsDialog: defaultSelection 'empty'); it starts from the page URL's
#: ``<dimension>_range`` instead when there is one, and ``*`` selects every key.
ALL_MODELS_LINK = "[select every registered model](?default_range=*)"


def _model_job(study: str):
    return dg.define_asset_job(
        f"{study}_model_job",
        selection=dg.AssetSelection.groups(study) - input_selection(study),
        description=f"Generate, extract and score one model partition of {study}, then rebuild its metric tables. "
        f"To run every registered model: {ALL_MODELS_LINK} (reopens this page so that Materialize "
        "starts with all model partitions selected), then Materialize all.",
    )


INPUT_JOBS = {s: _inputs_job(s) for s in STUDY_INPUTS}
MODEL_JOBS = {s: _model_job(s) for s in STUDY_INPUTS}
format_robustness_inputs_job = INPUT_JOBS["format_robustness"]
format_robustness_model_job = MODEL_JOBS["format_robustness"]
wrapper_sensitivity_inputs_job = INPUT_JOBS["wrapper_sensitivity"]
wrapper_sensitivity_model_job = MODEL_JOBS["wrapper_sensitivity"]
workflow_perturb_inputs_job = INPUT_JOBS["workflow_perturb"]
workflow_perturb_model_job = MODEL_JOBS["workflow_perturb"]
order_probe_inputs_job = INPUT_JOBS["order_probe"]
order_probe_model_job = MODEL_JOBS["order_probe"]


#: The cross-study report card (group ``model_upgrades``); run it after the studies' model jobs.
model_upgrades_job = dg.define_asset_job(
    "model_upgrades_job",
    selection=dg.AssetSelection.groups("model_upgrades"),
    description="Rebuild the robustness report card: every model's headline numbers across studies, with the "
    "change since the model's previous version.",
)
