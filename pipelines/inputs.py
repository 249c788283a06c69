"""Validation of a study's inputs before anything runs: the sources load, the config values hold.

Used twice with the same messages: by ``python -m pipelines.run`` before it launches a run, and
by every ``<study>_inputs_job`` as a config mapping (:func:`inputs_config`), which Dagster calls
when it builds the run's execution plan — at launch, before a run exists. A bad value (``limit:
0``, a source path that does not exist, a malformed JSONL line) therefore fails the launch with
one line naming the op, field or file, row and field, instead of a run that marks an asset
"Failed"; the UI shows that line as the error's message (:class:`InputsRejected`). (Materializing single assets from the asset graph uses Dagster's implicit asset job,
which has no config mapping: there the same checks fail the first step — the config class's
validator, then the loader's InputError.)

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
error from a user-code process), so :class:`InputsRejected` is one, carrying the line with no
stack: the dialog shows the line and nothing else. Each field's description also states the
values it takes (``limit``: N ≥ 1, -1 = every row).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import dagster as dg
import pydantic
from dagster._core.errors import DagsterUserCodeProcessError
from dagster_shared.error import SerializableErrorInfo

from metamorph.errors import ConfigError, MetamorphError
from metamorph.study import get


class InputsRejected(DagsterUserCodeProcessError):
    """An inputs job's config or sources, rejected when the run is launched (before a run exists).

    Its message is the one line of the :class:`~metamorph.errors.MetamorphError` behind it
    (``cause``), and so is its only error info (class name ``InputsRejected``, an empty stack): a
    DagsterError, so Dagster's user-code boundary passes it on unwrapped, and a
    ``DagsterUserCodeProcessError``, so the code server sends that info as the error and the
    launch dialog shows the line without stack frames.
    """

    def __init__(self, cause: MetamorphError):
        info = SerializableErrorInfo(message=str(cause), stack=[], cls_name=type(self).__name__)
        super().__init__(str(cause), user_code_process_error_infos=[info])
        self.cause = cause


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


def validate_inputs(study: str, classes: Mapping[str, type[dg.Config]], run_config: Mapping[str, Any]) -> None:
    """Build every op's config class from ``run_config`` (raises :class:`ConfigError` naming the op
    and field) and load the inputs asset's sources with the study's loader
    (:attr:`metamorph.study.Study.load_sources`; raises their InputError)."""
    ops = run_config.get("ops") or {}
    built = {}
    for op_name, cls in classes.items():
        values = (ops.get(op_name) or {}).get("config") or {}
        try:
            built[op_name] = cls(**values)
        except pydantic.ValidationError as exc:
            raise ConfigError(f"{op_name}: {one_line(exc)}") from None
    for cfg in built.values():
        if hasattr(cfg, "sources"):
            get(study).load_sources(list(cfg.sources), getattr(cfg, "row_limit", None))


def inputs_config(study: str, assets: list[dg.AssetsDefinition]) -> dg.ConfigMapping:
    """A config mapping for ``<study>_inputs_job``: the usual run config shape (``ops: <op>: config:``,
    every field with its default), checked by :func:`validate_inputs` when the run is launched; raises
    :class:`InputsRejected`."""
    classes = {a.op.name: c for a in assets if (c := config_class(a.op)) is not None}
    ops = dg.Shape(
        {
            name: dg.Field(
                dg.Shape({"config": dg.Field(cls.to_config_schema().config_type, is_required=False)}), is_required=False
            )
            for name, cls in classes.items()
        }
    )
    schema = {
        "ops": dg.Field(ops, is_required=False),
        "loggers": dg.Field(dg.Permissive(), is_required=False),
        "resources": dg.Field(dg.Permissive(), is_required=False),
        "execution": dg.Field(dg.Permissive(), is_required=False),
    }

    def check_then_pass(run_config: dict) -> dict:
        try:
            validate_inputs(study, classes, run_config)
        except MetamorphError as exc:
            raise InputsRejected(exc) from None
        return {k: v for k, v in run_config.items() if v}

    return dg.ConfigMapping(config_fn=check_then_pass, config_schema=schema)
