"""``StudySuite``: one evaluation of a study, declared in a ``defs.yaml`` (a Dagster component).

A suite is a study (:func:`metamorph.study.studies`) with its own sources, option values, models and
schedule. Each ``pipelines/defs/<suite>/defs.yaml`` declares one, and ``pipelines.definitions`` loads
them with ``dg.load_from_defs_folder``::

    type: pipelines.components.StudySuite
    attributes:
      study: <study>                       # a package of metamorph/studies/
      suite: <suite>                       # default: the study's name (its default suite)
      sources: ["<adapter>:<path>"]        # default: the study's default sources
      options: {limit: 20, k: 2}           # any option of `metamorph run <study> --help`, by its name
      models: registry                     # or a list of registry model ids
      schedule: {cron_schedule: "0 3 * * 1"}

What a suite owns (``<suite>`` = its name):

* its assets: the study's assets (``assets/<study>.py``) under the key prefix and group ``<suite>``,
  so their warehouse tables are ``<suite>.<table>`` and their materialization history is their own;
  their ops are ``<suite>__<asset>`` (the run config's ``ops`` keys), their config defaults the
  suite's sources and options (what the launchpad starts from; each is checked by the study's
  option when the suite loads, and again with the sources loaded when a run is launched);
* its checks (the study's, on the suite's assets);
* its jobs ``<suite>_inputs_job``, ``<suite>_model_job`` and ``<suite>_tables_job`` (:mod:`pipelines.jobs`;
  no tables job when the suite has no cross-model table);
  its cross-model tables carry the automation condition :func:`pipelines.jobs.cross_model_condition`;
* its schedule (:func:`pipelines.schedules.suite_schedule`), when it declares one.

The default suite of a study (``suite`` left out, or the study's name) is the study as it always
was: keys ``<study>/<asset>``, group, jobs and tables named by the study. Model partitions
(``model``) and the generation cache are shared: a request another suite already sent is a cache hit.
"""

from __future__ import annotations

import functools
import importlib
import re
import warnings
import zoneinfo
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import dagster as dg
import pydantic
import yaml
from pydantic import Field, PrivateAttr

from metamorph.errors import ConfigError

#: A suite's name: a Dagster asset key part, group, job-name prefix and DuckDB schema.
SUITE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
#: Names a suite cannot take, and what holds them.
RESERVED = {
    "model_upgrades": "the report card's asset group and schema",
    "metamorph_meta": "the warehouse's write ledger",
    "main": "DuckDB's default schema",
}


@functools.cache
def _duckdb_names() -> dict[str, str]:
    """The names a warehouse schema cannot take in DuckDB, and why: its reserved SQL keywords
    (``duckdb_keywords()``), its system catalogs, the ``temp`` and ``system`` catalogs every connection
    has and the warehouse file's own catalog (its stem) — a schema so named is a syntax error or an
    ambiguous reference when its first table is written."""
    import duckdb

    from resources.paths import warehouse_path

    con = duckdb.connect()
    try:
        keywords = con.execute("SELECT keyword_name FROM duckdb_keywords() WHERE keyword_category = 'reserved'")
        names = {k: "a reserved SQL keyword" for (k,) in keywords.fetchall()}
    finally:
        con.close()
    names.update({"information_schema": "a system catalog", "pg_catalog": "a system catalog"})
    names.update({"temp": "a catalog of every connection", "system": "a catalog of every connection"})
    names[Path(warehouse_path()).stem] = "the warehouse's catalog"
    return names


class SuiteSchedule(dg.Model):
    """When the suite's models are re-evaluated: ``<suite>_model_job`` once per model on the cron schedule."""

    cron_schedule: str = Field(description="A cron expression, e.g. '0 3 * * 1' (Monday 03:00).")
    execution_timezone: str = Field(default="UTC", description="The time zone of cron_schedule.")
    name: str | None = Field(default=None, description="The schedule's name (default: <suite>_schedule).")


class StudySuiteScaffolder(dg.Scaffolder):
    """``dg scaffold defs pipelines.components.StudySuite <name>``: a ``defs.yaml`` that loads as it is,
    a suite of the first study by name (:func:`metamorph.study.studies`) named after its folder,
    evaluating every registry model (edit the study, sources and options from there; docs/suites.md)."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        from dagster.components.component_scaffolding import scaffold_component

        from metamorph.study import studies

        attributes = {"study": min(studies()), "suite": request.target_path.name, "models": "registry"}
        scaffold_component(request, attributes)


@dg.scaffold_with(StudySuiteScaffolder)
class StudySuite(dg.Component, dg.Model, dg.Resolvable):
    """One suite of a study: the study's assets under the suite's key prefix and group, with its
    own sources, options, models, jobs, warehouse tables and schedule (module docstring)."""

    study: str = Field(description="The study: a package of metamorph/studies/ (`metamorph run --help` lists them).")
    suite: str | None = Field(
        default=None,
        description="The suite's name: asset key prefix, group, job prefix and warehouse schema "
        "(lower case letters, digits, _). Default: the study's name (its default suite).",
    )
    sources: list[str] | None = Field(
        default=None, description="Source specs, as --source takes them (default: the study's default sources)."
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Option values by name, as `metamorph run <study>` takes them (e.g. limit, k, max_tokens); "
        "they become the defaults of the suite's run config.",
    )
    models: Literal["registry"] | list[str] = Field(
        default="registry",
        description="The models the suite evaluates: 'registry' (every registry entry, approved and "
        "candidates) or a list of registry model ids.",
    )
    schedule: SuiteSchedule | None = Field(default=None, description="Re-evaluate the suite's models on a cron.")
    #: The ``defs.yaml`` that declares the suite (None for a suite built in code).
    _file: Path | None = PrivateAttr(default=None)

    @classmethod
    def load(cls, attributes, context: dg.ComponentLoadContext) -> StudySuite:
        component = super().load(attributes, context)
        component._file = context.path / "defs.yaml"
        return component

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        try:
            return suite_definitions(self)
        except ConfigError as exc:
            raise ConfigError(f"{context.path / 'defs.yaml'}: {exc}") from None

    @property
    def name(self) -> str:
        """The suite's name (the study's for its default suite)."""
        return self.suite or self.study


def _suite_options(component: StudySuite, study) -> dict[str, Any]:
    """The suite's option values by name (``sources`` among them), each checked by the study's
    :class:`metamorph.study.Option`; :class:`ConfigError` naming the attribute otherwise."""
    given = dict(component.options)
    if "sources" in given:
        raise ConfigError("options.sources: give the sources as the attribute sources")
    if component.sources is not None:
        given["sources"] = list(component.sources)
    for name, value in given.items():
        where = "sources" if name == "sources" else f"options.{name}"
        try:
            option = study.option(name)
        except KeyError:
            names = sorted(o.name for o in study.all_options() if o.targets or o.drops_assets)
            raise ConfigError(f"{where}: {study.name} has no option {name!r}; it has {names}") from None
        if not option.targets and not option.drops_assets:
            raise ConfigError(f"{where}: {name!r} chooses what a command runs; it is not a suite option")
        if option.flag:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: must be true or false, got {value!r:.40}")
            continue
        if option.repeat or option.nargs:
            if not isinstance(value, list) or not value:
                raise ConfigError(f"{where}: must be a non-empty list, got {value!r:.60}")
        elif isinstance(value, list):
            continue  # a list option parsed from one text (--formats a,b): its config class checks it
        try:
            option.check(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return given


def _config_defaults(study, given: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{asset: {config field: value}}`` of the option values ``given`` (:attr:`Option.targets`)."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in given.items():
        for asset, fld in study.option(name).targets:
            out.setdefault(asset, {})[fld] = value
    return out


@functools.cache
def _study_module_defs(study: str) -> tuple[tuple[dg.AssetsDefinition, ...], tuple[dg.AssetChecksDefinition, ...]]:
    """The assets and the standalone asset checks of the study's module (``Study.assets_module``)."""
    from metamorph.study import get

    module = importlib.import_module(get(study).assets_module)
    return tuple(dg.load_assets_from_modules([module])), tuple(dg.load_asset_checks_from_modules([module]))


def _rekeyed(ad, study: str, suite: str, names: Sequence[str]):
    """``ad`` with every key of the study (``<study>/<name>`` and a bare ``<name>`` input) under
    ``suite`` instead, and its assets in the group ``suite``."""
    replacements = {}
    for n in names:
        replacements[dg.AssetKey([study, n])] = dg.AssetKey([suite, n])
        replacements[dg.AssetKey([n])] = dg.AssetKey([suite, n])
    ad = ad.with_attributes(asset_key_replacements=replacements)
    if isinstance(ad, dg.AssetChecksDefinition) or not list(ad.specs):
        return ad
    return ad.map_asset_specs(lambda spec: spec.replace_attributes(group_name=suite))


def suite_definitions(component: StudySuite) -> dg.Definitions:
    """The assets, checks, jobs and schedule of one suite (module docstring); :class:`ConfigError`
    naming the attribute for a bad study, suite name, option value or model list."""
    from metamorph.study import studies
    from pipelines.inputs import checked_at_launch
    from pipelines.jobs import (
        cross_model_condition,
        INPUT_JOBS,
        REGISTRY_CONDITION,
        MODEL_JOBS,
        TABLES_JOBS,
        inputs_job,
        model_job,
        per_model_condition,
        split_assets,
        tables_job,
        tables_selection,
    )
    from pipelines.schedules import suite_schedule

    found = studies()
    if component.study not in found:
        raise ConfigError(f"study: no study {component.study!r}; the studies are {sorted(found)}")
    study = found[component.study]
    suite = component.name
    if not SUITE_NAME.match(suite):
        raise ConfigError(
            f"suite: {suite!r:.70} is not a suite name (lower case letters, digits and _, a letter first)"
        )
    if suite != study.name and suite in found:
        raise ConfigError(f"suite: {suite!r} is the name of a study; name the suite otherwise")
    if suite in RESERVED:
        raise ConfigError(f"suite: {suite!r} is taken ({RESERVED[suite]}); name the suite otherwise")
    if suite != study.name and suite in _duckdb_names():
        raise ConfigError(
            f"suite: {suite!r} is a name DuckDB keeps for itself ({_duckdb_names()[suite]}); name the suite otherwise"
        )
    if isinstance(component.models, list) and not component.models:
        raise ConfigError("models: an empty list; give registry model ids, or 'registry'")

    given = _suite_options(component, study)
    defaults = _config_defaults(study, given)
    dropped = {a for n, v in given.items() if v is True for a in study.option(n).drops_assets}

    assets, checks = _study_module_defs(study.name)
    names = sorted({k.path[-1] for ad in assets for k in ad.keys if k.path[0] == study.name})
    unknown = sorted(set(defaults) - set(names))
    if unknown:
        raise ConfigError(f"options: no asset {unknown} in {study.name}")

    per_model, cross_model = split_assets(study.name)
    after_generations = per_model_condition(dg.AssetSelection.assets(*[[suite, n] for n in sorted(per_model)]))
    after_models = cross_model_condition(tables_selection(study, suite, frozenset(dropped)))
    built = []
    for ad in assets:
        name = ad.key.path[-1]
        if name in dropped:
            continue
        if suite != study.name:
            ad = _rekeyed(ad, study.name, suite, names)
        if name in cross_model:
            ad = ad.map_asset_specs(lambda spec: spec.replace_attributes(automation_condition=after_models))
        elif name == study.generations:  # it depends on its registry entry (assets.registry)
            ad = ad.map_asset_specs(lambda spec: spec.replace_attributes(automation_condition=REGISTRY_CONDITION))
        elif name in per_model:
            ad = ad.map_asset_specs(lambda spec: spec.replace_attributes(automation_condition=after_generations))
        try:
            built.append(
                checked_at_launch(ad, study=study.name, op_name=f"{suite}__{name}", defaults=defaults.get(name))
            )
        except ConfigError as exc:
            # the config class's own check of a default: "<field>: <message>"
            raise ConfigError(f"{'' if str(exc).startswith('sources:') else 'options.'}{exc}") from None
    suite_checks = [
        c if suite == study.name else _rekeyed(c, study.name, suite, names)
        for c in checks
        if not {k.asset_key.path[-1] for k in c.check_keys} & dropped
    ]
    if suite == study.name and not dropped:
        jobs = [INPUT_JOBS[study.name], MODEL_JOBS[study.name], TABLES_JOBS.get(study.name)]
    else:
        dropped = frozenset(dropped)
        jobs = [inputs_job(study, suite), model_job(study, suite, dropped), tables_job(study, suite, dropped)]
    jobs = [j for j in jobs if j is not None]  # no tables job for a suite without cross-model tables
    schedules = []
    if component.schedule is not None:
        _check_schedule(component.schedule)
        try:
            schedules.append(
                suite_schedule(
                    study,
                    jobs[1],
                    suite=suite,
                    name=component.schedule.name,
                    cron_schedule=component.schedule.cron_schedule,
                    execution_timezone=component.schedule.execution_timezone,
                    models=None if component.models == "registry" else component.models,
                )
            )
        except dg.DagsterInvalidDefinitionError:  # Dagster's own parse of the cron expression
            raise ConfigError(
                f"schedule.cron_schedule: {component.schedule.cron_schedule!r:.60} is not a cron expression "
                "(five fields: minute hour day-of-month month day-of-week, e.g. '0 4 * * 1')"
            ) from None
    return dg.Definitions(assets=built, asset_checks=suite_checks, jobs=jobs, schedules=schedules)


#: A schedule's name, as Dagster takes it.
SCHEDULE_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def _check_schedule(schedule: SuiteSchedule) -> None:
    """:class:`ConfigError` naming the attribute for a schedule name Dagster does not take or a time
    zone that is not an IANA name (the cron expression is Dagster's to parse)."""
    if schedule.name is not None and not SCHEDULE_NAME.match(schedule.name):
        raise ConfigError(f"schedule.name: {schedule.name!r:.60} is not a schedule name (letters, digits and _)")
    try:
        zoneinfo.ZoneInfo(schedule.execution_timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"schedule.execution_timezone: {schedule.execution_timezone!r:.60} is not a time zone "
            "(an IANA name such as 'UTC' or 'Europe/Paris')"
        ) from None


def schedule_name(suite: StudySuite) -> str | None:
    """The name of the suite's schedule (:func:`pipelines.schedules.suite_schedule`), None without one."""
    if suite.schedule is None:
        return None
    return suite.schedule.name or f"{suite.name}_schedule"


#: The attributes whose value has a shape pydantic's words do not say, and that shape.
SHAPES = {
    "models": "'registry' or a list of registry model ids",
    "options": "a mapping of option names to values",
    "schedule": "a mapping with cron_schedule (and optionally execution_timezone, name)",
    "sources": "a list of source specs, e.g. ['medqa:data/mine.jsonl']",
}


def _yaml_duplicate(node: yaml.Node, path: str = "") -> tuple[str, str] | None:
    """The first key a mapping of the composed YAML ``node`` gives twice: (its dotted path without
    ``attributes.``, "given twice (lines a and b)"); ``None`` when there is none."""
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key, line = str(key_node.value), key_node.start_mark.line + 1
            at = f"{path}.{key}" if path else key
            if key in first:
                return at.removeprefix("attributes."), f"given twice (lines {first[key]} and {line})"
            first[key] = line
            found = _yaml_duplicate(value_node, at)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            found = _yaml_duplicate(item, path)
            if found:
                return found
    return None


def _check_defs_files(defs_root: Path) -> None:
    """:class:`ConfigError`, one line naming the file (and line), for a ``defs.yaml`` under
    ``defs_root`` that Dagster would fail on with a traceback or read silently wrong: a directory,
    bytes that are not UTF-8, no document (empty, or comments only), a document that is not a
    mapping, a key given twice (YAML keeps the last), a ``type`` that names no class. A YAML
    syntax error is left to the load (:func:`_load_error` names its line)."""
    from metamorph.datasets import decode_utf8
    from metamorph.errors import InputError

    for path in sorted(defs_root.rglob("defs.yaml")):
        if path.is_dir():
            raise ConfigError(f"{path}: is a directory, expected a suite's YAML file")
        try:
            text = decode_utf8(path.read_bytes(), str(path))
        except InputError as exc:
            raise ConfigError(f"{path}{'' if exc.row is None else f':{exc.row}'}: {exc.problem}") from None
        try:
            documents = [d for d in yaml.compose_all(text, Loader=yaml.SafeLoader) if d is not None]
        except yaml.YAMLError:
            continue
        if not documents:
            raise ConfigError(
                f"{path}: no suite in it (the file is empty or only comments); a defs.yaml declares "
                "type: pipelines.components.StudySuite and its attributes (docs/suites.md)"
            )
        for doc in documents:
            line = doc.start_mark.line + 1
            if not isinstance(doc, yaml.MappingNode):
                shape = "a list" if isinstance(doc, yaml.SequenceNode) else f"{doc.value!r:.40}"
                raise ConfigError(f"{path}:{line}: a suite is a mapping of type and attributes, got {shape}")
            duplicate = _yaml_duplicate(doc)
            if duplicate:
                at, problem = duplicate
                second = problem.rsplit(" ", 1)[-1].rstrip(")")
                raise ConfigError(f"{path}:{second}: {at}: {problem}; YAML would keep the last one silently")
            for key_node, value_node in doc.value:
                if getattr(key_node, "value", None) == "type" and isinstance(value_node, yaml.ScalarNode):
                    _check_type(str(value_node.value), f"{path}:{key_node.start_mark.line + 1}")


def _check_type(name: str, where: str) -> None:
    """:class:`ConfigError` at ``where`` when the component type ``name`` (``module.Class``) names no class."""
    module, _, attr = name.rpartition(".")
    why = None
    try:
        found = importlib.import_module(module) if module else None
    except ImportError:
        found = None
    if found is None:
        why = f"no module {module or name}"
    elif not hasattr(found, attr):
        why = f"module {module} has no {attr}"
    if why:
        raise ConfigError(
            f"{where}: type: {name!r:.80} is not a component type ({why}); a suite's type is "
            "pipelines.components.StudySuite"
        )


def _load_error(exc: BaseException, defs_root: Path) -> ConfigError:
    """One line naming the ``defs.yaml`` and the attribute for an error of loading the defs folder
    at ``defs_root``: the suite's own :class:`ConfigError`, a YAML syntax error (with its line) or a
    pydantic error of the attributes; Dagster's tree and stack frames left out. Any other error is
    raised as it is."""
    folder = None
    chain = exc
    while chain is not None:
        if isinstance(chain, ConfigError):
            return chain
        if isinstance(chain, yaml.MarkedYAMLError):
            mark = chain.problem_mark
            where = f"{mark.name}:{mark.line + 1}" if mark is not None else "defs.yaml"
            what = ": ".join(t for t in (chain.context, chain.problem) if t)
            return ConfigError(f"{where}: YAML syntax: {what}")
        if isinstance(chain, pydantic.ValidationError):
            err = chain.errors()[0]
            loc = ".".join(str(p) for p in err["loc"] if p != "attributes") or "attributes"
            where = defs_root / folder / "defs.yaml" if folder else defs_root
            marked = re.fullmatch(r"`?(?:attributes\.)?(.+?) at (\S+):(\d+)`?", loc)  # Dagster's own: file, line
            if marked:
                loc, where = marked.group(1), f"{marked.group(2)}:{marked.group(3)}"
            # a union's branch tag (models.literal['registry'], options.dict[str,any]) is pydantic's, not the file's
            parts = loc.split(".")
            kept = [p for p in parts if not re.fullmatch(r"\w+\[.*\]", p)]
            tagged, loc = len(kept) < len(parts), ".".join(kept)
            msg = err["msg"]
            if loc in SHAPES and (tagged or err["type"].endswith("_type")):
                msg = f"must be {SHAPES[loc]}, got {err['input']!r:.60}"
            return ConfigError(f"{where}: {loc}: {msg}")
        found = re.match(r"Error while (?:loading component|building definitions for) (\S+)\[\d+\]:", str(chain))
        if found and folder is None:
            folder = found.group(1).replace(".", "/")
        chain = chain.__cause__ or chain.__context__
    raise exc


def _unique(suites: Sequence[StudySuite]) -> None:
    """:class:`ConfigError` naming both files when two suites take the same name (they would write
    the same tables and define the same jobs)."""
    seen: dict[str, StudySuite] = {}
    for s in suites:
        first = seen.setdefault(s.name, s)
        if first is not s:
            raise ConfigError(
                f"{s._file}: suite: {s.name!r} is also the suite of {first._file}; each suite needs its own name "
                "(it names the suite's tables, jobs and schedule)"
            )


def _unique_schedules(suites: Sequence[StudySuite]) -> None:
    """:class:`ConfigError` naming both files when two suites' schedules take one name, naming the
    study when a suite's schedule takes the weekly schedule of a default suite no ``defs.yaml``
    declares, and naming the sensor when it takes a sensor's name (:data:`pipelines.sensors.SENSORS`;
    the code location holds one schedule or sensor per name)."""
    from metamorph.study import studies
    from pipelines.sensors import SENSORS

    declared = {s.name for s in suites}
    implicit = {f"{name}_weekly": name for name in studies() if name not in declared}
    seen: dict[str, StudySuite] = {}
    for s in suites:
        name = schedule_name(s)
        if name is None:
            continue
        if name in SENSORS:
            raise ConfigError(
                f"{s._file}: schedule.name: {name!r} is the name of a sensor ({SENSORS[name]}); each schedule "
                "needs a name no sensor or other schedule takes"
            )
        if name in implicit:
            raise ConfigError(
                f"{s._file}: schedule.name: {name!r} is the weekly schedule of the default suite of "
                f"{implicit[name]}; each schedule needs its own name"
            )
        first = seen.setdefault(name, s)
        if first is not s:
            raise ConfigError(
                f"{s._file}: schedule.name: {name!r} is also the schedule of {first._file}; each schedule "
                "needs its own name"
            )


def load_project(project_root=None) -> tuple[dict[str, StudySuite], dg.Definitions]:
    """Every suite declared in the defs folder of the dg project at ``project_root`` (default: this
    project), by name, and the folder's definitions. Raises :class:`ConfigError`, one line naming
    the ``defs.yaml`` and the attribute, when a suite does not load or two take one name."""
    from pipelines.definitions import PROJECT_ROOT

    tree = dg.ComponentTree.for_project(path_within_project=project_root or PROJECT_ROOT)
    defs_root = Path(tree.defs_module.__file__).parent
    _check_defs_files(defs_root)
    try:
        with warnings.catch_warnings():  # as dg.load_from_defs_folder: the tree's beta/preview notices stay off stderr
            warnings.simplefilter("ignore", dg.BetaWarning)
            warnings.simplefilter("ignore", dg.PreviewWarning)
            suites = tree.get_all_components(of_type=StudySuite)
            _unique(suites)
            _unique_schedules(suites)
            built = tree.build_defs()
    except Exception as exc:  # Dagster wraps the suite's error in its tree of the folder
        raise _load_error(exc, defs_root) from None
    return {c.name: c for c in suites}, built


def project_suites(project_root=None) -> dict[str, StudySuite]:
    """Every suite declared in the defs folder of the dg project at ``project_root`` (default: this
    project), by name (:func:`load_project`)."""
    return load_project(project_root)[0]


def chosen_suite(study, name: str | None, project_root=None) -> StudySuite | None:
    """The suite ``name`` of ``study`` (no name, or the study's own: its default suite, the
    ``defs.yaml`` that declares it, or ``None`` when none does). Raises :class:`ConfigError` naming
    the study's suites when there is no such suite or it is a suite of another study, and naming the
    ``defs.yaml`` when the defs folder does not load."""
    suites = project_suites(project_root)
    if name is None or name == study.name:
        return suites.get(study.name)
    found = suites.get(name)
    if found is None or found.study != study.name:
        own = sorted(n for n, s in suites.items() if s.study == study.name and n != study.name)
        why = (
            f"{study.name} has no suite {name!r}" if found is None else f"a suite of {found.study}, not of {study.name}"
        )
        raise ConfigError(
            f"--suite {name!r}: {why}; the suites of {study.name} are {[study.name, *own]} "
            "(pipelines/defs/<suite>/defs.yaml)"
        )
    return found


def suite_values(study, suite: StudySuite | None, given: Mapping[str, Any]):
    """The :class:`metamorph.study.Options` of a run of ``suite`` (``None``: a default suite no
    ``defs.yaml`` declares, the study's options as they are):
    the suite's sources and options, then the options ``given`` on the command line over them;
    ``--models`` defaults to the suite's model ids (``models: registry``: every registry model).
    The values taken from the suite have its ``defs.yaml`` and attribute as their
    :attr:`metamorph.study.Options.origins` (``'<defs.yaml>: models'``, ``'<defs.yaml>: sources'``),
    which errors about them name."""
    from metamorph.study import Options

    values = {} if suite is None else _suite_options(suite, study)
    origins = {}
    if suite is not None and isinstance(suite.models, list):
        values["models"] = list(suite.models)
        origins["models"] = f"{suite._file}: models" if suite._file is not None else "models"
    if suite is not None and suite.sources is not None:
        origins["sources"] = f"{suite._file}: sources" if suite._file is not None else "sources"
    return Options(study, {**values, **given}, origins={k: v for k, v in origins.items() if k not in given})
