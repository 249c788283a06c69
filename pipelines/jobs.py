"""Jobs: per suite of a study (``pipelines/defs/<suite>/defs.yaml``, :mod:`pipelines.components`),
one job for its unpartitioned inputs and one per-model job. A study's default suite is named like
the study (:func:`metamorph.study.studies`); another suite's jobs, asset keys and group are named
by the suite.

* ``<suite>_inputs_job`` — the suite's source items and their surface forms (unpartitioned);
* ``<suite>_model_job`` — what ONE model partition needs of its own: the partitioned assets
  (generations, extraction; format routing's choice ``routing_choice_per_model``, learnt from the
  model's own generations, and its routed calls: :func:`split_assets`). Sensors and schedules
  launch the model jobs per model;
* ``<suite>_tables_job`` (none for a suite without cross-model tables) — the cross-model tables: every other unpartitioned asset (the metric
  tables and the upgrade verdicts ``model_comparison``), which re-read all model partitions. They
  are built once after the model runs: by their automation condition (:func:`cross_model_condition`,
  the sensor ``cross_model_tables_automation``) or, for ``metamorph run``, by one run of this job
  after its model runs. A failed model run never plans them, so it never marks them failed;
* ``model_upgrades_job`` — the cross-study robustness report card.
"""

import functools
import importlib
from collections.abc import Collection

import dagster as dg

from assets.partitions import model_partitions
from metamorph.study import Study, studies


def cross_model_condition(tables: dg.AssetSelection) -> dg.AutomationCondition:
    """When a cross-model table (one of ``tables``, a suite's :func:`tables_selection`) is requested
    by declarative automation: a dependency (a model partition, an input, another table) was updated
    since the table was last requested or built, by a run that did not plan the table, and no
    dependency outside ``tables`` is requested on the same tick or in progress, nor the table (a
    sweep over the models ends before the tables are built, once, in one run). Unlike
    ``AutomationCondition.eager()``, a registered model partition that was never evaluated does not
    hold the tables back, and a table that was never built is not requested on its own (its inputs
    may not exist yet)."""
    return (
        dg.AutomationCondition.any_deps_updated().since_last_handled()
        & ~dg.AutomationCondition.any_deps_match(dg.AutomationCondition.will_be_requested()).ignore(tables)
        & ~dg.AutomationCondition.any_deps_in_progress()
        & ~dg.AutomationCondition.in_progress()
    ).with_label("a model partition or input was updated; none requested or in progress")


#: When a study's generation partition is re-run by declarative automation: its registry entry
#: (``model_registry/registry_entry``, :mod:`assets.registry`) was observed with another data version
#: (fingerprint, or the version its provider serves) since the partition was last requested or
#: built, the partition was evaluated before (a registered model never evaluated is not run by
#: automation) and no run of it is in progress.
REGISTRY_CONDITION = (
    dg.AutomationCondition.any_deps_match(dg.AutomationCondition.data_version_changed())
    .allow(dg.AssetSelection.assets(["model_registry", "registry_entry"]))
    .since_last_handled()
    & ~dg.AutomationCondition.missing()
    & ~dg.AutomationCondition.in_progress()
).with_label("its registry entry or the version its provider serves changed")


def per_model_condition(per_model: dg.AssetSelection) -> dg.AutomationCondition:
    """The automation condition of a per-model asset after the generations: requested with its
    model's generation partition (a parent in ``per_model`` requested on the same tick), for
    partitions evaluated before, none in progress."""
    return (
        dg.AutomationCondition.any_deps_match(dg.AutomationCondition.will_be_requested()).allow(per_model)
        & ~dg.AutomationCondition.missing()
        & ~dg.AutomationCondition.in_progress()
    ).with_label("its model's generations are re-run")


@functools.cache
def split_assets(study_name: str) -> tuple[frozenset[str], frozenset[str]]:
    """``(per_model, cross_model)``: the names of the study's assets (its ``Study.assets_module``) that are
    not its inputs, split in two. ``per_model``: the partitioned assets and the unpartitioned ones a
    partitioned asset reads, directly or not (they must be built within a model's run);
    ``cross_model``: the other unpartitioned assets."""
    study = studies()[study_name]
    module = importlib.import_module(study.assets_module)
    parents: dict[str, set[str]] = {}
    partitioned: set[str] = set()
    for ad in dg.load_assets_from_modules([module]):
        for spec in ad.specs:
            name = spec.key.path[-1]
            parents[name] = {d.asset_key.path[-1] for d in spec.deps}
            if ad.partitions_def is not None:
                partitioned.add(name)
    needed = set(partitioned)
    frontier = list(partitioned)
    while frontier:
        for p in parents.get(frontier.pop(), ()):
            if p not in needed and p in parents:
                needed.add(p)
                frontier.append(p)
    own = set(parents) - set(study.inputs)
    return frozenset(own & needed), frozenset(own - needed)


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


def split_ops(study: Study, ops: dict) -> tuple[dict, dict]:
    """A model run's config ``ops`` (``{"<suite>__<asset>": …}``) split into those of
    ``<suite>_model_job`` and those of ``<suite>_tables_job`` (:func:`split_assets`)."""
    cross_model = split_assets(study.name)[1]
    tables = {k: v for k, v in ops.items() if k.split("__", 1)[1] in cross_model}
    return {k: v for k, v in ops.items() if k not in tables}, tables


def model_job(study: Study, suite: str | None = None, dropped: frozenset[str] = frozenset()):
    """``<suite>_model_job``: the per-model assets (:func:`split_assets`) of the group ``suite``
    (default: the study's default suite) but those in ``dropped``, for one model partition."""
    from pipelines.inputs import model_partition_config

    suite = suite or study.name
    of = study.name if suite == study.name else f"the {suite} suite of {study.name}"
    names = sorted(split_assets(study.name)[0] - dropped)
    return dg.define_asset_job(
        f"{suite}_model_job",
        selection=dg.AssetSelection.assets(*[[suite, n] for n in names]),
        config=model_partition_config(model_partitions),
        description=f"Generate, extract and score one model partition of {of}. Its cross-model metric tables "
        f"are built once after the model runs ({suite}_tables_job; automatically when the sensor "
        "cross_model_tables_automation is on). "
        f"To run every registered model: {ALL_MODELS_LINK} (reopens this page so that Materialize "
        "starts with all model partitions selected), then Materialize all. A partition that is not a "
        "registry model id is refused at launch; `metamorph partitions --remove <id>` removes it.",
    )


def table_names(study: Study, dropped: Collection[str] = frozenset()) -> frozenset[str]:
    """The names of ``study``'s cross-model tables (:func:`split_assets`) but those in ``dropped``
    (empty: a study with none, or a suite that leaves them all out — it has no tables job)."""
    return split_assets(study.name)[1] - frozenset(dropped)


def tables_selection(study: Study, suite: str | None = None, dropped: frozenset[str] = frozenset()):
    """The cross-model tables (:func:`table_names`) of ``suite`` but those in ``dropped``."""
    return dg.AssetSelection.assets(*[[suite or study.name, n] for n in sorted(table_names(study, dropped))])


def tables_job(study: Study, suite: str | None = None, dropped: frozenset[str] = frozenset()):
    """``<suite>_tables_job``: the cross-model tables of ``suite`` (default: the study's default
    suite), built once from every model partition evaluated so far; None when there is none
    (:func:`table_names`): a run of it would build nothing."""
    if not table_names(study, dropped):
        return None
    suite = suite or study.name
    of = study.name if suite == study.name else f"the {suite} suite of {study.name}"
    return dg.define_asset_job(
        f"{suite}_tables_job",
        selection=tables_selection(study, suite, dropped),
        description=f"Rebuild the cross-model metric tables of {of} (and model_comparison) from every model "
        f"evaluated so far. Run it after {suite}_model_job's runs; the sensor cross_model_tables_automation "
        "does it on its own when it is on.",
    )


#: study name -> ``<study>_inputs_job`` / ``<study>_model_job`` of its default suite, for every discovered study.
INPUT_JOBS = {name: inputs_job(s) for name, s in studies().items()}
MODEL_JOBS = {name: model_job(s) for name, s in studies().items()}
#: ... and ``<study>_tables_job``, for every study with cross-model tables.
TABLES_JOBS = {name: job for name, s in studies().items() if (job := tables_job(s)) is not None}


#: The cross-study report card (group ``model_upgrades``); run it after the studies' model jobs.
model_upgrades_job = dg.define_asset_job(
    "model_upgrades_job",
    selection=dg.AssetSelection.groups("model_upgrades"),
    description="Rebuild the robustness report card: every model's headline numbers across studies, with the "
    "change since the model's previous version.",
)
