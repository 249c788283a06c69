"""Errors raised by metamorph with enough context to fix the input."""

from __future__ import annotations


class MetamorphError(Exception):
    """Base class of every error metamorph raises on purpose."""


#: Longest ``problem`` text an :class:`InputError` keeps (characters); a longer one — usually an
#: echoed value — is cut, so that the error stays one readable line.
MAX_PROBLEM_CHARS = 500


class InputError(MetamorphError, ValueError):
    """Bad input data: names the file, the row (1-based line/record number) and the field.

    The message is one line, ``<source>[, row <row>][, field '<field>']: <problem>``: line breaks
    in ``problem`` become spaces and a problem longer than :data:`MAX_PROBLEM_CHARS` is cut.

    Attributes:
        source: file path or URI the record came from.
        row: 1-based record number in that source (``None`` for whole-file problems).
        field: the offending field (``None`` when the problem is the whole row or file).
        problem: what is wrong, in words.
    """

    def __init__(self, source: str, problem: str, row: int | None = None, field: str | None = None):
        problem = " ".join(str(problem).splitlines())
        if len(problem) > MAX_PROBLEM_CHARS:
            problem = problem[:MAX_PROBLEM_CHARS - 1] + "…"
        self.source = str(source)
        self.row = row
        self.field = field
        self.problem = problem
        where = self.source
        if row is not None:
            where += f", row {row}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {problem}")


class ConfigError(MetamorphError, ValueError):
    """A study or provider is configured inconsistently (unknown provider, missing env var name...)."""


class ContextBudgetError(MetamorphError, ValueError):
    """A prompt does not fit the model's context budget; raised before any call is made."""


class RegistryError(InputError, ConfigError):
    """The model registry file is invalid: names the file, the entry of ``models`` (``row``,
    1-based) and the key (``field``). Both an :class:`InputError` and a :class:`ConfigError`."""


class BudgetError(MetamorphError, ValueError):
    """The planned cost of a run's model calls exceeds the configured budget (``budget_usd``), or
    cannot be computed because the model has no price; raised before the first call, so nothing
    is called or written. The message is one line naming the model, the calls and the two amounts."""
