"""The ``metamorph`` commands of the Dagster project: ``metamorph run`` and ``metamorph partitions``.

The library's console script (:mod:`metamorph.cli`) knows nothing above it; it finds these through
the entry point ``pipelines`` of the group :data:`metamorph.cli.COMMAND_GROUP` (``pyproject.toml``).
``COMMANDS`` has the shape of the core commands' (name → (help, description, add_arguments(parser),
run(args) → exit code)). Importing this module imports no Dagster: :mod:`pipelines.run` and
:mod:`pipelines.partitions` are imported when their command runs.

:func:`suite_values` (entry point ``pipelines`` of :data:`metamorph.suites.SUITES_GROUP`) gives
``metamorph plan --suite`` a suite's options, as a run of that suite sees them; :func:`suite_studies`
gives ``metamorph trace`` and ``metamorph verdict --suite`` the project's suites.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from metamorph.study import add_study_commands


def _run(args: argparse.Namespace) -> int:
    from pipelines.run import run

    return run(args)


def _partitions_arguments(p: argparse.ArgumentParser) -> None:
    from pipelines.partitions import add_arguments

    add_arguments(p)


def _partitions(args: argparse.Namespace) -> int:
    from pipelines.partitions import run

    return run(args)


#: ``metamorph run`` and ``metamorph partitions`` (Dagster is imported when the command runs).
COMMANDS = {
    "run": (
        "materialize a study on the persistent Dagster instance and print its headline tables",
        "Load the study's sources, run its inputs job and then its model job for every registry model "
        "(or --models), on the instance in DAGSTER_HOME (default data/dagster_home; the UI shows the "
        "runs: make ui), then print the study's headline tables. `metamorph run <study> --help` lists "
        "the study's options.",
        add_study_commands,
        _run,
    ),
    "partitions": (
        "list the model partitions of the Dagster instance; remove one that is not a registry model",
        "One line per model partition of the instance in DAGSTER_HOME (default data/dagster_home) and whether it is "
        "a registry model. --remove ID... deletes partitions that are not (e.g. a typo added in the UI's 'Add a "
        "partition'); warehouse rows and run history are kept.",
        _partitions_arguments,
        _partitions,
    ),
}


def suite_values(study, suite: str | None, given: Mapping[str, Any]):
    """The :class:`metamorph.study.Options` of a run of the suite named ``suite`` of ``study``
    (None: its default suite, as its ``defs.yaml`` declares it) with the options ``given`` on the
    command line over the suite's (:func:`pipelines.components.suite_values`);
    :class:`metamorph.errors.ConfigError` when the study has no such suite."""
    from pipelines.components import chosen_suite
    from pipelines.components import suite_values as values

    return values(study, chosen_suite(study, suite), given)


def suite_studies() -> dict[str, str]:
    """Suite name → study name of every suite of the project (:func:`pipelines.components.project_suites`),
    each study's default suite (named like the study) among them, declared or not;
    :class:`metamorph.errors.ConfigError` naming the ``defs.yaml`` when the defs folder does not load."""
    from metamorph.study import studies
    from pipelines.components import project_suites

    return {**{name: name for name in studies()}, **{n: s.study for n, s in project_suites().items()}}
