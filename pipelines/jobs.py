"""Jobs: per suite of a study (``pipelines/defs/<suite>/defs.yaml``, :mod:`pipelines.components`),
one job for its unpartitioned inputs and one per-model job. A study's default suite is named like
the study (:func:`metamorph.study.studies`); another suite's jobs, asset keys and group are named
by the suite.

* ``<suite>_inputs_job`` — the suite's source items and their surface forms (unpartitioned);
* ``<suite>_model_job`` — everything downstream for ONE model partition (generations, extraction)
  plus the cross-model metric tables (and the upgrade verdicts ``model_comparison``), which re-read
  all partitions. Sensors and schedules launch the model jobs per model;
* ``model_upgrades_job`` — the cross-study robustness report card.
"""

import dagster as dg

from assets.partitions import model_partitions
from metamorph.study import Study, studies


def input_selection(study: Study, suite: str | None = None) -> dg.AssetSelection:
    """The unpartitioned input assets (:attr:`metamorph.study.Study.inputs`) of ``suite`` (asset key
    prefix; default: the study's default suite, named like the study)."""
    return dg.AssetSelection.assets(*[[suite or study.name, name] for name in study.inputs])


def inputs_job(study: Study, suite: str | None = None):
    """``<suite>_inputs_job``: the input assets of ``suite`` (default: the study's default suite)."""
    suite = suite or study.name
    of = study.name if suite == study.name else f"{suite} suite of {study.name}"
    return dg.define_asset_job(
        f"{suite}_inputs_job",
        selection=input_selection(study, suite),
        description=f"Load the {of} study's sources and render their surface forms. The config is checked "
        "(sources loaded, values in range) when the run is launched: a bad value fails the launch "
        "with one line, no run is created (pipelines.inputs).",
    )


#: The partition dialog of Dagster 1.13's UI opens with no partition selected
#: (LaunchAssetChoosePartitionsDialog: defaultSelection 'empty'); it starts from the page URL's
#: ``<dimension>_range`` instead when there is one, and ``*`` selects every key.
ALL_MODELS_LINK = "[select every registered model](?default_range=*)"


def model_job(study: Study, suite: str | None = None):
    """``<suite>_model_job``: every asset of the group ``suite`` (default: the study's default suite)
    but its inputs, for one model partition."""
    from pipelines.inputs import model_partition_config

    suite = suite or study.name
    of = study.name if suite == study.name else f"the {suite} suite of {study.name}"
    return dg.define_asset_job(
        f"{suite}_model_job",
        selection=dg.AssetSelection.groups(suite) - input_selection(study, suite),
        config=model_partition_config(model_partitions),
        description=f"Generate, extract and score one model partition of {of}, then rebuild its metric tables. "
        f"To run every registered model: {ALL_MODELS_LINK} (reopens this page so that Materialize "
        "starts with all model partitions selected), then Materialize all. A partition that is not a "
        "registry model id is refused at launch; `metamorph partitions --remove <id>` removes it.",
    )


#: study name -> ``<study>_inputs_job`` / ``<study>_model_job`` of its default suite, for every discovered study.
INPUT_JOBS = {name: inputs_job(s) for name, s in studies().items()}
MODEL_JOBS = {name: model_job(s) for name, s in studies().items()}


#: The cross-study report card (group ``model_upgrades``); run it after the studies' model jobs.
model_upgrades_job = dg.define_asset_job(
    "model_upgrades_job",
    selection=dg.AssetSelection.groups("model_upgrades"),
    description="Rebuild the robustness report card: every model's headline numbers across studies, with the "
    "change since the model's previous version.",
)
