"""Errors raised by metamorph with enough context to fix the input."""

from __future__ import annotations

import os
import re

__all__ = [
    "MAX_PROBLEM_CHARS",
    "REDACTED",
    "SECRET_PATTERN",
    "BudgetError",
    "ConfigError",
    "ContextBudgetError",
    "InputError",
    "MetamorphError",
    "RegistryError",
    "looks_like_secret",
    "mask_secrets",
]


class MetamorphError(Exception):
    """Base class of every error metamorph raises on purpose.

    Its message (``str``) shows secret-looking text (:func:`looks_like_secret`) as
    :data:`REDACTED`: an error can echo a value the user typed (a model id, a source path, a
    command-line option), and a pasted key must not reach stderr, a run log or Dagster's event log.
    """

    def __str__(self) -> str:
        return mask_secrets(super().__str__())


#: Longest ``problem`` text an :class:`InputError` keeps (characters); a longer one — usually an
#: echoed value — is cut, so that the error stays one readable line.
MAX_PROBLEM_CHARS = 500


#: Text that looks like a credential: a token with a known key prefix (OpenAI ``sk-``, Anthropic
#: ``sk-ant-``, Stripe-style ``sk_``/``rk_``, GitHub ``ghp_``/``github_pat_``, Slack ``xox?-``,
#: Hugging Face ``hf_``, GitLab ``glpat-``, AWS ``AKIA``, Google ``AIza``), a JSON Web Token, a
#: ``Bearer`` value, or any run of 20 or more letters and digits holding both (random key material;
#: words, model names and version numbers are separated by ``-``, ``_``, ``.`` or ``/``).
SECRET_PATTERN = re.compile(
    r"(?<![A-Za-z0-9])(?:sk|rk|pk)[-_][A-Za-z0-9_\-]{8,}"
    r"|(?<![A-Za-z0-9])(?:ghp|gho|ghu|ghs|ghr|github_pat|glpat|hf|xox[abprs])[-_][A-Za-z0-9_\-]{8,}"
    r"|(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{12,}"
    r"|(?<![A-Za-z0-9])AIza[0-9A-Za-z_\-]{20,}"
    r"|(?<![A-Za-z0-9])eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{8,}"
    r"|(?<![A-Za-z0-9])(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{20,}"
)

#: What a secret-looking value is shown as in an error message.
REDACTED = "[REDACTED]"


def looks_like_secret(text: object) -> bool:
    """Whether ``text`` (its ``str``) holds anything matching :data:`SECRET_PATTERN`."""
    return SECRET_PATTERN.search(str(text)) is not None


#: Characters that end the token a secret-looking match is part of (see :func:`mask_secrets`).
_TOKEN_ENDS = set(" \t\n'\"`,=()[]<>")


def _in_existing_path(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` lies inside a token (delimited by :data:`_TOKEN_ENDS`) that
    names a file or directory that exists (it has a ``/``), e.g. the registry file the message
    names."""
    i, j = start, end
    while i > 0 and text[i - 1] not in _TOKEN_ENDS:
        i -= 1
    while j < len(text) and text[j] not in _TOKEN_ENDS:
        j += 1
    token = text[i:j].rstrip(":;.")
    if "/" not in token:
        return False
    try:
        return os.path.exists(token)
    except (OSError, ValueError):  # a name too long or with a NUL is no path here
        return False


def mask_secrets(text: object) -> str:
    """``str(text)`` with every match of :data:`SECRET_PATTERN` replaced by :data:`REDACTED`,
    except inside the path of a file or directory that exists: a message names the user's own
    file (``/data/sk_models.yaml``, a cache folder named by a hash) as it is, so the user can
    find it; a key is never a path on the disk."""
    s = str(text)
    return SECRET_PATTERN.sub(lambda m: m.group(0) if _in_existing_path(s, m.start(), m.end()) else REDACTED, s)


class InputError(MetamorphError, ValueError):
    """Bad input data: names the file, the row (1-based line/record number) and the field.

    The message is one line, ``<source>[, row <row>][, field '<field>']: <problem>``: line breaks
    in ``problem`` become spaces, a problem longer than :data:`MAX_PROBLEM_CHARS` is cut, and
    secret-looking text in ``problem`` and ``field`` (:func:`looks_like_secret`: a value echoed
    from a data file can be a pasted key) is shown as :data:`REDACTED` — the message reaches
    stderr, the run log and Dagster's event log.

    Attributes:
        source: file path or URI the record came from.
        row: 1-based record number in that source (``None`` for whole-file problems).
        field: the offending field (``None`` when the problem is the whole row or file).
        problem: what is wrong, in words.
    """

    def __init__(self, source: str, problem: str, row: int | None = None, field: str | None = None):
        problem = mask_secrets(" ".join(str(problem).splitlines()))
        field = None if field is None else mask_secrets(field)
        if len(problem) > MAX_PROBLEM_CHARS:
            problem = problem[: MAX_PROBLEM_CHARS - 1] + "…"
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
    1-based) and the key (``field``). Both an :class:`InputError` and a :class:`ConfigError`.

    A registry is where a key gets pasted by mistake (into ``status``, ``model``, a URL, a key
    name...), so every part of the message that looks like a secret (:func:`looks_like_secret`) —
    in the problem and in the field — is shown as :data:`REDACTED`, whichever field it came from."""

    def __init__(self, source: str, problem: str, row: int | None = None, field: str | None = None):
        super().__init__(source, mask_secrets(problem), row=row, field=None if field is None else mask_secrets(field))


class BudgetError(MetamorphError, ValueError):
    """The planned cost of a run's model calls exceeds the configured budget (``budget_usd``), or
    cannot be computed because the model has no price; raised before the first call, so nothing
    is called or written. The message is one line naming the model, the calls and the two amounts."""
