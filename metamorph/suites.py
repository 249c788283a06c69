"""A study's suites as the commands that read the warehouse see them: ``metamorph trace``,
``metamorph verdict`` and ``metamorph plan`` take ``--suite <name>``.

A suite is one evaluation of a study with its own warehouse schema, named like the suite (the
default suite of a study is named like the study, and so is its schema). The suites are declared
by the Dagster project (``pipelines/defs/<suite>/defs.yaml``); the library knows them through the
entry point of the group :data:`SUITES_GROUP`, whose module has ``suite_studies()`` (suite name →
study name, every study's default suite among them). With no such project installed, each study
has its default suite only.

Pure library: no Dagster.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from metamorph.errors import ConfigError

__all__ = ["SUITES_GROUP", "suite_hook", "suite_schema", "suite_studies"]

#: Entry-point group of the project's suites: the entry point is ``(study, suite name, options
#: given) -> Options`` (``metamorph plan --suite``); its module has ``suite_studies()``.
SUITES_GROUP = "metamorph.suites"


def suite_hook():
    """The entry point of :data:`SUITES_GROUP` (the first installed), or None when no project with
    suites is installed."""
    hooks = list(entry_points(group=SUITES_GROUP))
    return hooks[0] if hooks else None


def suite_studies() -> dict[str, str]:
    """Suite name → the name of the study it evaluates, for every suite of the installed project
    (each study's default suite, named like the study, among them). Raises :class:`ConfigError`
    (one line naming the ``defs.yaml``) when the project's suites do not load."""
    from metamorph.study import studies

    hook = suite_hook()
    if hook is None:
        return {name: name for name in studies()}
    return dict(importlib.import_module(hook.module).suite_studies())


def suite_schema(study: str, suite: str | None) -> str:
    """The warehouse schema of the suite ``suite`` of the study named ``study`` (``None``: the
    study's default suite, whose schema is the study's name). Raises :class:`ConfigError`, one line
    naming the study's suites, when ``suite`` is not one of them."""
    if suite is None or suite == study:
        return study
    known = suite_studies()
    found = known.get(suite)
    if found != study:
        own = sorted(n for n, s in known.items() if s == study and n != study)
        why = f"{study} has no suite {suite!r}" if found is None else f"a suite of {found}, not of {study}"
        raise ConfigError(
            f"--suite {suite!r}: {why}; the suites of {study} are {[study, *own]} (pipelines/defs/<suite>/defs.yaml)"
        )
    return suite
