"""Jobs: per study (:func:`metamorph.study.studies`), one job for its unpartitioned inputs and one per-model job.

* ``<study>_inputs_job`` — the study's source items and their surface forms (unpartitioned);
* ``<study>_model_job`` — everything downstream for ONE model partition (generations, extraction)
  plus the cross-model metric tables (and the upgrade verdicts ``model_comparison``), which re-read
  all partitions. Sensors and schedules launch the model jobs per model;
* ``model_upgrades_job`` — the cross-study robustness report card.
"""

import dagster as dg

from assets.partitions import model_partitions
from metamorph.study import Study, studies


def input_selection(study: Study) -> dg.AssetSelection:
    """The study's unpartitioned input assets (:attr:`metamorph.study.Study.inputs`)."""
    return dg.AssetSelection.assets(*[[study.name, name] for name in study.inputs])


def _inputs_job(study: Study):
    return dg.define_asset_job(
        f"{study.name}_inputs_job",
        selection=input_selection(study),
        description=f"Load the {study.name} study's sources and render their surface forms. The config is checked "
        "(sources loaded, values in range) when the run is launched: a bad value fails the launch "
        "with one line, no run is created (pipelines.inputs).",
    )


#: The partition dialog of Dagster 1.13's UI opens with no partition selected
#: (LaunchAssetChoosePartitionsDialog: defaultSelection 'empty'); it starts from the page URL's
#: ``<dimension>_range`` instead when there is one, and ``*`` selects every key.
ALL_MODELS_LINK = "[select every registered model](?default_range=*)"


def _model_job(study: Study):
    from pipelines.inputs import model_partition_config

    return dg.define_asset_job(
        f"{study.name}_model_job",
        selection=dg.AssetSelection.groups(study.name) - input_selection(study),
        config=model_partition_config(model_partitions),
        description=f"Generate, extract and score one model partition of {study.name}, then rebuild its metric tables. "
        f"To run every registered model: {ALL_MODELS_LINK} (reopens this page so that Materialize "
        "starts with all model partitions selected), then Materialize all. A partition that is not a "
        "registry model id is refused at launch; `metamorph partitions --remove <id>` removes it.",
    )


#: study name -> ``<study>_inputs_job`` / ``<study>_model_job``, for every discovered study.
INPUT_JOBS = {name: _inputs_job(s) for name, s in studies().items()}
MODEL_JOBS = {name: _model_job(s) for name, s in studies().items()}


#: The cross-study report card (group ``model_upgrades``); run it after the studies' model jobs.
model_upgrades_job = dg.define_asset_job(
    "model_upgrades_job",
    selection=dg.AssetSelection.groups("model_upgrades"),
    description="Rebuild the robustness report card: every model's headline numbers across studies, with the "
    "change since the model's previous version.",
)
