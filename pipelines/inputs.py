"""Checks of a run's config and partition when the run is launched, before a run exists.

Config: every asset whose op takes a pythonic config class is given, in the code location, an op
whose config mapping builds that class and, for an inputs asset (a config with ``sources``), loads
its sources with the study's loader (:func:`checked_at_launch`). Dagster applies an op's config
mapping when it builds the run's execution plan, for every job the asset is in — the study's
jobs, and Dagster's implicit asset job behind an asset's own "Materialize" and "Open launchpad".
A bad value (``limit: 0``, a source path that does not exist, a malformed JSONL line, ``k: 0``)
therefore fails the launch with one line naming the op and field, or the file, row and field,
instead of a run that marks an asset "Failed" (:class:`InputsRejected`). ``python -m
pipelines.run`` checks the same values with the same messages before it launches anything.

Partition: the model jobs' partition is a registry model id (:func:`model_partition_config`): a
partition key that is not one (a typo added in the UI's "Add a partition") is refused when the
UI asks for the partition's run config and tags, which it does before launching a run, and by
``execute_in_process`` before the run is created (:class:`PartitionRejected`).

What the launchpad shows (Dagster 1.13.27). The webserver checks a run config against the job's
config *schema* first (dagster_graphql ``implementation/external.py`` ``ensure_valid_config``);
a schema error (a text for a number, an unknown field) is a ``RunConfigValidationInvalid``, shown
as one line in the launchpad's error panel before Launch. A schema holds types only — no range,
no file — so these checks run in the code server, when it builds the execution plan: an exception
there (``dagster/_grpc/server.py`` ``ExecutionPlanSnapshot``) is sent back as its
``SerializableErrorInfo`` and returned to the UI as a ``PythonError`` (HTTP 500), whose message and
stack the launch dialog shows (ui-core ``app/PythonErrorInfo.tsx``). Dagster serialises a
``DagsterUserCodeProcessError`` that carries one error info as that info itself
(``dagster/_utils/error.py`` ``serializable_error_info_from_exc_info``, the way it forwards an
error from a user-code process), so :class:`LaunchRejected` is one, carrying the line with no
stack: the dialog shows the line and nothing else. Each field's description also states the
values it takes (``limit``: N ≥ 1, -1 = every row).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import dagster as dg
import pydantic
from dagster_shared.error import SerializableErrorInfo

from metamorph.errors import ConfigError, MetamorphError
from metamorph.study import get
from pipelines.instance import DagsterUserCodeProcessError


class LaunchRejected(DagsterUserCodeProcessError):
    """A launch refused before a run exists: its message is the one line of the
    :class:`~metamorph.errors.MetamorphError` behind it (``cause``), and so is its only error info
    (the class name, an empty stack): a DagsterError, so Dagster's user-code boundary passes it on
    unwrapped, and a ``DagsterUserCodeProcessError``, so the code server sends that info as the
    error and the launch dialog shows the line without stack frames.
    """

    def __init__(self, cause: MetamorphError):
        info = SerializableErrorInfo(message=str(cause), stack=[], cls_name=type(self).__name__)
        super().__init__(str(cause), user_code_process_error_infos=[info])
        self.cause = cause


class InputsRejected(LaunchRejected):
    """An op's config or an inputs asset's sources, rejected when the run is launched."""


class PartitionRejected(LaunchRejected):
    """A model job's partition that is not a registry model id, rejected when the run is launched."""


def config_class(op: dg.OpDefinition) -> type[dg.Config] | None:
    """The pythonic config class of the ``config`` parameter of an asset's op, if it has one."""
    fn = op.compute_fn.decorated_fn
    hints = typing.get_type_hints(fn)
    cls = hints.get("config")
    return cls if isinstance(cls, type) and issubclass(cls, dg.Config) else None


def one_line(exc: pydantic.ValidationError) -> str:
    """A pydantic error as one line: ``field: message; field: message``."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg'].removeprefix('Value error, ')}"
        for e in exc.errors()
    )


def validate_config(study: str, op_name: str, cls: type[dg.Config], values: Mapping[str, Any]) -> None:
    """Build ``cls`` from ``values`` (raises :class:`ConfigError` naming the op and field) and, for a
    config with ``sources``, load them as the source asset does (:meth:`metamorph.study.Study.load`
    with the config's limit and sampling fields; raises the loader's InputError)."""
    try:
        cfg = cls(**values)
    except pydantic.ValidationError as exc:
        raise ConfigError(f"{op_name}: {one_line(exc)}") from None
    if hasattr(cfg, "sources"):
        s = get(study)
        s.load(list(cfg.sources), getattr(cfg, "row_limit", None), **{n: getattr(cfg, n) for n in s.sampling})


def config_with_defaults(cls: type[dg.Config], defaults: Mapping[str, Any]) -> type[dg.Config]:
    """A subclass of ``cls`` whose fields ``defaults`` names default to the given values (validated
    there, with the class's own checks: :class:`ConfigError` naming the field otherwise); the other
    fields, descriptions and checks are ``cls``'s. ``cls`` itself when ``defaults`` is empty."""
    if not defaults:
        return cls
    unknown = sorted(set(defaults) - set(cls.model_fields))
    if unknown:
        raise ConfigError(f"{cls.__name__} has no field(s) {unknown}; it has {sorted(cls.model_fields)}")
    fields = {
        name: (cls.model_fields[name].annotation, pydantic.Field(value, description=cls.model_fields[name].description))
        for name, value in defaults.items()
    }
    try:
        cls(**defaults)  # given values, so that the class's field checks run
    except pydantic.ValidationError as exc:
        raise ConfigError(one_line(exc)) from None
    return pydantic.create_model(cls.__name__, __base__=cls, __module__=cls.__module__, **fields)


def checked_at_launch(
    asset: dg.AssetsDefinition,
    study: str | None = None,
    op_name: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> dg.AssetsDefinition:
    """``asset`` with an op whose config mapping runs :func:`validate_config` with ``study``'s loader
    (default: the first part of the asset key) and passes the config on unchanged; raises
    :class:`InputsRejected`. The config schema (fields, descriptions) is the config class's, its
    defaults those of ``defaults`` where given (:func:`config_with_defaults`: a suite's sources and
    options). ``op_name`` renames the op (a suite's ``<suite>__<asset>``; default: unchanged). An
    asset without a config class keeps its op, renamed when ``op_name`` is given; ``defaults`` for
    it raise :class:`ConfigError`."""
    if (
        not isinstance(asset, dg.AssetsDefinition)
        or not asset.is_executable
        or not isinstance(asset.node_def, dg.OpDefinition)
    ):
        return asset
    op = asset.op
    name = op_name or op.name
    cls = config_class(op)
    if cls is None:
        if defaults:
            raise ConfigError(f"{asset.key.to_user_string()} takes no config, got {sorted(defaults)}")
        if name == op.name:
            return asset
        return dg.AssetsDefinition.dagster_internal_init(
            **{**asset.get_attributes_dict(), "node_def": op.with_replaced_properties(name=name)}
        )
    study = study or asset.keys_by_output_name[next(iter(asset.keys_by_output_name))].path[0]
    schema_cls = config_with_defaults(cls, defaults or {})

    def check_then_pass(values: dict) -> dict:
        try:
            validate_config(study, name, cls, values)
        except MetamorphError as exc:
            raise InputsRejected(exc) from None
        return values

    checked = op.configured(check_then_pass, name=name, config_schema=schema_cls.to_config_schema())
    return dg.AssetsDefinition.dagster_internal_init(**{**asset.get_attributes_dict(), "node_def": checked})


def check_model_partition(key: str) -> None:
    """Raise :class:`PartitionRejected` unless ``key`` is a model id of the registry
    (``resources.paths.registry_path``); a registry that does not load is rejected with its own line."""
    from metamorph.models import load_registry
    from resources.paths import registry_path

    path = registry_path()
    try:
        ids = [m.id for m in load_registry(path)]
    except MetamorphError as exc:
        raise PartitionRejected(exc) from None
    if key not in ids:
        raise PartitionRejected(
            ConfigError(
                f"partition {key!r} is not a model of the registry {path} (models: {', '.join(ids) or 'none'}); "
                "launch a registered model, or register it first. To remove the partition: "
                f"metamorph partitions --remove {key}"
            )
        )


def model_partition_config(partitions_def: dg.PartitionsDefinition) -> dg.PartitionedConfig:
    """The model jobs' config: no run config of its own (``{}``); the partition key is checked by
    :func:`check_model_partition` when Dagster asks for a partition's run config or tags — the UI
    before it launches a partition, a sensor or schedule when it resolves a run request,
    ``execute_in_process`` before it creates the run."""

    def run_config(key: str) -> dict:
        check_model_partition(key)
        return {}

    def tags(key: str) -> dict:
        check_model_partition(key)
        return {}

    return dg.PartitionedConfig(
        partitions_def=partitions_def, run_config_for_partition_key_fn=run_config, tags_for_partition_key_fn=tags
    )
