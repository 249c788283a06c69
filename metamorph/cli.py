"""The ``metamorph`` console script: one subcommand per command.

Core commands (not tied to one study) come from the modules in :data:`CORE_MODULES`, the
commands of the installed project from the entry points of :data:`COMMAND_GROUP`, and each study's
own (:attr:`metamorph.study.Study.commands` of :func:`metamorph.study.studies`). Each is a dict name
→ (help, description, add_arguments(parser), run(args) → exit code); this module only collects them,
so the entry point names no study. Commands today: ``metamorph gate`` (WorkflowPerturb CI gate),
``metamorph trace`` (a metric cell back to its raw completions, :mod:`metamorph.trace`) and
``metamorph plan`` (calls, cache hits, tokens and cost of a study's run before it is made,
:mod:`metamorph.costplan`), ``metamorph run`` (a study's run on the Dagster instance,
``pipelines.commands``) and ``metamorph verdict`` (a candidate's upgrade verdicts from the
warehouse, exit 1 on a blocking regression: :mod:`metamorph.verdict`).

Exit codes follow the commands; a usage error is 2 and ``--help`` is 0.
"""

from __future__ import annotations

import argparse
import os
import importlib
import re
import sys
from collections.abc import Sequence

from metamorph.errors import mask_secrets

__all__ = [
    "COMMAND_GROUP",
    "CORE_MODULES",
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "OneLineParser",
    "commands",
    "main",
    "plain",
]

EXIT_USAGE = 2
#: Exit code when the command is interrupted (Ctrl-C: 128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
#: Exit code when standard output is closed by its reader (128 + SIGPIPE, as a shell reports it).
EXIT_BROKEN_PIPE = 141

#: Modules of the core commands, each with a ``COMMANDS`` dict like a study's.
CORE_MODULES = ("metamorph.trace", "metamorph.costplan", "metamorph.verdict")
#: Entry-point group of the command modules an installed project adds, each with ``COMMANDS``
#: (the Dagster project's ``metamorph run`` and ``metamorph partitions``: ``pipelines.commands``).
COMMAND_GROUP = "metamorph.commands"


def commands() -> dict[str, tuple]:
    """The core commands, the installed project's and every study's
    (:attr:`metamorph.study.Study.commands`), merged; a name defined twice is a ``RuntimeError``."""
    from metamorph.study import studies

    from importlib.metadata import entry_points

    modules = [importlib.import_module(name) for name in CORE_MODULES]
    modules += [ep.load() for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda ep: ep.name)]
    tables = [getattr(mod, "COMMANDS", {}) for mod in modules]
    tables += [study.commands() for study in studies().values() if study.commands is not None]
    out: dict[str, tuple] = {}
    for table in tables:
        for name, spec in table.items():
            if name in out:
                raise RuntimeError(f"the command {name!r} is defined twice")
            out[name] = spec
    return out


def plain(text: str | None) -> str | None:
    """A docstring paragraph as terminal text: reST markup (``code``, **bold**, :func:`x`) removed."""
    if text is None:
        return None
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return text.replace("``", "").replace("**", "")


class OneLineParser(argparse.ArgumentParser):
    """An argument error is one line on stderr (``metamorph verdict: error: argument --study: …  (see:
    metamorph verdict --help)``) and exit 2, like a bad input file; ``--help`` still prints the usage.
    Subcommand parsers are of the same class (argparse creates them with the parent's class).

    Options are matched by their whole name only (``allow_abbrev`` off): ``--seed -1`` is an
    unrecognized argument, not ``--seeds -1``."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        # an option's value is echoed ("got 'X'"): a key typed there is shown as [REDACTED]
        self.exit(2, f"{self.prog}: error: {mask_secrets(message)}  (see: {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="metamorph", description="metamorph: metamorphic robustness studies.")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, (help_text, description, add_arguments, run) in sorted(commands().items()):
        p = sub.add_parser(name, help=plain(help_text), description=plain(description))
        add_arguments(p)
        p.set_defaults(func=run)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``metamorph`` console script; returns the exit code. Ctrl-C at any point
    (while the commands' modules load, before a run starts) is one line on stderr and
    :data:`EXIT_INTERRUPTED`, never a traceback; a command that handles it itself (``metamorph
    run`` during a run) says more."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("metamorph: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    ap = _parser()
    try:
        args = ap.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, not as "Exception ignored" at exit
        return code
    except BrokenPipeError:
        # the reader went away (``metamorph trace … | head``): stop quietly, as a Unix filter does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
