"""A study as one value: its assets, its options, its loaders, its plan, its headline and card.

Each study package declares ``STUDY = Study(...)`` in ``metamorph/studies/<name>/study.py``;
:func:`studies` discovers them (nothing lists the studies by hand). Everything that used to repeat
the studies — the jobs, the inputs check, the code location, the sensors and schedules, the report
card, ``metamorph run`` / ``metamorph plan`` — iterates :func:`studies`.

* :class:`Option` — one command-line / run-config option of a study: its parser (the one place its
  range or choices are written), its documented default and where its value goes in the Dagster run
  config (``targets``: ``(asset, config field)`` pairs). The assets' config classes validate the same
  fields through :meth:`Option.check`, so the launchpad and the command line reject the same values
  with the same words.
* :func:`common_options` — the options every study has (``--source``, ``--limit``, ``--max-tokens``,
  ``--models``, ``--budget-usd``, ``--no-models``), their targets taken from the :class:`Study`.
* :class:`Options` — the value of every option of one study (the documented default unless given),
  what ``cost_steps``, ``headline`` and the run config read.
* :class:`Deferred` — a function or table of a study module named by ``"module:attribute"``, imported
  when first used (a study's ``study.py`` imports none of its plan, report or lineage modules).
* :class:`Study` — the study's assets (``inputs``, ``source_asset``, ``generations``), its own
  :class:`Option` table and every part the shared machinery asks for: the functions it calls, its
  :class:`Card`, its :class:`Comparison`, its traces, commands, vocabulary and SQL folder. Nothing
  outside this module finds a part of a study by its module's name.

The command line (``metamorph run <study>``, ``metamorph plan <study>``, ``python -m pipelines.run
<study>``) is one sub-command per study built by :func:`add_study_commands` from the study's options:
both commands parse and validate every option the same way. No Dagster here: ``metamorph run`` is
a command of the Dagster project (:mod:`pipelines.commands`), which the console script finds through
its entry point (:data:`metamorph.cli.COMMAND_GROUP`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import math
import pkgutil
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from metamorph.errors import ConfigError, InputError

REPO_ROOT = Path(__file__).resolve().parent.parent

#: The run config's ``limit`` meaning "every row" (``--limit`` not given). Dagster's launchpad leaves a
#: field whose default is null out of the scaffolded config, so "no limit" is a number that is shown;
#: 0 is rejected rather than read as "all" (a user who types 0 means "spend nothing").
ALL_ROWS = -1
#: The run config's ``budget_usd`` meaning "no budget" (``--budget-usd -1``, shown in the launchpad like
#: :data:`ALL_ROWS`; 0 means "spend nothing": a priced run with any call to make stops).
NO_BUDGET = -1.0
#: The launchpad's description of ``budget_usd`` (every generation asset of :attr:`Study.budget_assets`).
BUDGET_HELP = (
    "Stop before the first call when this step's planned cost for the model (USD, registry price_per_mtok; "
    "output at max_tokens) exceeds it: an amount in USD ≥ 0, or -1 = no budget (the model_registry resource's "
    "budget_usd still applies)."
)


@dataclass(frozen=True)
class Deferred:
    """A module's attribute named ``"package.module:attribute"``, imported when first used: a study's
    ``study.py`` declares its plan, report, lineage and command functions without importing their
    modules, so discovering the studies stays cheap. Calling it calls the attribute with the same
    arguments; with ``value=True`` calling it returns the attribute itself (a table such as a
    study's ``TRACES``). Equal, hashable and picklable by its target, as a :class:`Study` must be.

    Raises ``ImportError`` / ``AttributeError`` when called if the target does not exist (the layout
    tests resolve every study's targets)."""

    target: str
    value: bool = False

    def resolve(self) -> Any:
        module, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def __call__(self, *args, **kwargs):
        found = self.resolve()
        return found if self.value else found(*args, **kwargs)


# ------------------------------------------------------------------------------------------
# Parsers: a value as text -> the value, or ArgumentTypeError with one line


def whole_number(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """A parser of a whole number ``lo <= n`` (``<= hi`` when given). Raises
    ``argparse.ArgumentTypeError`` with ``must be a whole number >= 1, got '0'`` or ``must be a whole
    number from 1 to 100, got '1000000000'`` (:func:`check_value` gives pydantic the same words)."""
    rule = f">= {lo}" if hi is None else f"from {lo} to {hi}"

    def parse(text: str) -> int:
        try:
            value = int(str(text))
        except ValueError:
            value = None
        if value is None or value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be a whole number {rule}, got {str(text)!r:.40}")
        return value

    parse.__name__ = f"whole_number_{rule.replace(' ', '_')}"
    parse.config_type = int
    return parse


#: A positive count (rows, goldens, variants, tokens).
positive = whole_number(1)
#: A sampling seed: 0 to 2**31 - 1 (the registry's seed range; llama.cpp reads a negative seed as "random").
seed = whole_number(0, 2**31 - 1)


def budget(text: str) -> float | None:
    """``--budget-usd``: a finite amount in USD >= 0, or -1 for no budget (returned as ``None``).
    Raises ``argparse.ArgumentTypeError`` otherwise (NaN would pass every check, a negative amount
    would stop every step)."""
    message = f"must be an amount in USD >= 0, or -1 for no budget; got {str(text)!r:.40}"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(message) from None
    if value == -1:
        return None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(message)
    return value


budget.config_type = float


def source_spec(text: str) -> str:
    """A ``--source`` spec as given (each study's loader checks it, naming the spec)."""
    return text


# ------------------------------------------------------------------------------------------
# Option


@dataclass(frozen=True)
class Option:
    """One option of a study, as the command line and the Dagster run config see it.

    ``name``: the value's name (``k`` → ``--k``, ``llm_goldens`` → ``--llm-goldens``; the attribute of
    :class:`Options`). ``parse(text)``: the validator of one value (raises
    ``argparse.ArgumentTypeError`` / ``ValueError`` with a one-line message); ``default``: the
    documented default (shown in ``--help``; ``None`` = the study's own, as the help says);
    ``nargs``: ``"+"`` for a list (an option given twice adds to it); ``flag``: a ``store_true`` switch; ``repeat``: given once per value
    (``--source a --source b``); ``choices``: the allowed values; ``cli``: the option's spelling
    when it is not ``--<name>``.

    ``targets``: ``(asset, config field)`` pairs the value is written to in the run config (in the
    inputs job when the asset is one of :attr:`Study.inputs`, else in the model job); an option with
    none (``--models``) shapes the run itself. ``drops_assets``: a flag that, when set, leaves these
    assets (names in the study's group) out of the model job (the format study's ``--no-routing``).

    The same option is the field of each target asset's Dagster config class (generated from it by
    ``assets._common.study_config``), as the launchpad shows it: ``config_help`` its description
    (default :attr:`help`); ``config_default`` its default when :attr:`default` is ``None`` (the
    study's own value, or a value read as "not given": -1 = every row, -1 = no budget; the launchpad
    accepts its default unchecked); ``config_type`` its type when the parser does not say it
    (:meth:`field_type`); ``config_check`` the check of a config value when it is not :meth:`check`
    (a list the command line takes as one comma-separated value).
    """

    name: str
    help: str
    parse: Callable[[str], Any] = str
    default: Any = None
    nargs: str | None = None
    flag: bool = False
    repeat: bool = False
    choices: tuple[str, ...] | None = None
    targets: tuple[tuple[str, str], ...] = ()
    drops_assets: tuple[str, ...] = ()
    cli: str = ""
    config_help: str = ""
    config_default: Any = None
    config_type: Any = None
    config_check: Callable[[Any], Any] | None = None

    @property
    def flag_name(self) -> str:
        """The option on the command line: :attr:`cli` when set (``sources`` is ``--source``, given
        once per spec), else ``--<name>`` with dashes."""
        return self.cli or "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> Any:
        """``value`` (a config value: int, float, list …) validated as :func:`check_value` does with
        this option's parser and choices, and returned unchanged."""
        return check_value(self.parse, value, self.choices)

    def field_type(self) -> Any:
        """The type of the option's config field: :attr:`config_type` when set; ``bool`` for a flag;
        else the parser's ``config_type`` (``int`` for :func:`whole_number`, ``float`` for
        :func:`budget`, otherwise ``str``), in a ``list`` when the option takes several values."""
        if self.config_type is not None:
            return self.config_type
        if self.flag:
            return bool
        one = getattr(self.parse, "config_type", str)
        return list[one] if (self.nargs or self.repeat) else one

    def field_default(self) -> Any:
        """The default of the option's config field: ``False`` for a flag, :attr:`default` (a list
        copied), else :attr:`config_default`."""
        if self.flag:
            return False
        if self.default is not None:
            return list(self.default) if isinstance(self.default, (list, tuple)) else self.default
        return self.config_default

    def field_help(self) -> str:
        """The description of the option's config field: :attr:`config_help`, else :attr:`help`."""
        return self.config_help or self.help

    @property
    def restricts(self) -> bool:
        """Whether a value can be refused: a flag, or an option whose parser takes any text
        (``str``, :func:`source_spec`: a source is checked by the study's loader) without choices,
        restricts nothing (its config field gets no validator)."""
        if self.flag:
            return False
        return self.config_check is not None or self.choices is not None or self.parse not in (str, source_spec)

    def check_field(self, value: Any) -> Any:
        """A config value of the option checked (:attr:`config_check`, else :meth:`check`); its
        :meth:`field_default` passes unchecked. Returned unchanged; ``ValueError`` with the command
        line's words otherwise."""
        if value == self.field_default():
            return value
        return (self.config_check or self.check)(value)

    def help_text(self) -> str:
        """The help line: :attr:`help`, then the default when it is not said already."""
        if self.flag or self.default is None or "default" in self.help:
            return self.help
        shown = " ".join(map(str, self.default)) if isinstance(self.default, (list, tuple)) else self.default
        return f"{self.help} (default: {shown})"

    def add_to(self, group: Any) -> None:
        """Add the option to an argparse parser or argument group. Every option's argparse default
        is ``None`` (``False`` for a flag), so "given" is told from "not given"."""
        if self.flag:
            group.add_argument(self.flag_name, dest=self.name, action="store_true", help=self.help_text())
            return
        kwargs: dict[str, Any] = {
            "dest": self.name,
            "type": self.parse,
            "default": None,
            "help": self.help_text(),
            "metavar": self.flag_name.lstrip("-").replace("-", "_").upper(),
        }
        if self.repeat:
            kwargs["action"] = "append"
        if self.nargs:  # given twice (--models a --models b): both lists, never only the last
            kwargs["nargs"], kwargs["action"] = self.nargs, "extend"
        if self.choices is not None:
            kwargs["choices"], kwargs["metavar"] = self.choices, None
        group.add_argument(self.flag_name, **kwargs)


def check_value(parse: Callable[[str], Any], value: Any, choices: Sequence[str] | None = None) -> Any:
    """``value`` (a config value: int, float, list …) validated through ``parse`` — each element of a
    list, as text — and ``choices``; returned unchanged. Raises ``ValueError`` with the parser's
    one-line message (pydantic shows it as ``Value error, <message>``), the words the command line
    prints for the same value."""
    values = value if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if choices is not None and v not in choices:
            raise ValueError(f"invalid choice: {v!r} (choose from {', '.join(map(repr, choices))})")
        try:
            parse(str(v))
        except argparse.ArgumentTypeError as exc:
            raise ValueError(str(exc)) from None
    return value


def common_options(study: Study) -> tuple[Option, ...]:
    """The options every study has, their targets taken from ``study``: ``--source`` and ``--limit``
    go to :attr:`Study.source_asset`, ``--max-tokens`` to :attr:`Study.generations`, ``--budget-usd``
    to every asset of :attr:`Study.budget_assets`; ``--models`` and ``--no-models`` choose what runs."""
    return (
        Option(
            "sources",
            "source spec (repeatable)",
            source_spec,
            default=list(study.default_sources),
            repeat=True,
            cli="--source",
            targets=((study.source_asset, "sources"),),
            config_help=study.sources_help,
        ),
        Option(
            "limit",
            f"N rows of each source (>= 1): {study.limit_rule}; default every row",
            positive,
            targets=((study.source_asset, "limit"),),
            config_help=study.limit_help,
            config_default=ALL_ROWS,
        ),
        Option(
            "max_tokens",
            f"completion budget per call of {study.generations} (>= 1; default: the study's own)",
            positive,
            targets=((study.generations, "max_tokens"),),
            config_help=study.max_tokens_help,
            config_default=study.max_tokens_default,
        ),
        Option("models", "registry model ids, space- or comma-separated (default: all)", nargs="+"),
        Option(
            "budget_usd",
            f"stop before the first call of a generation step ({', '.join(study.budget_assets)}) whose planned "
            "cost for a model (registry price_per_mtok) exceeds this many USD; -1 = no budget (default); "
            f"`metamorph plan {study.name}` prints the plan",
            budget,
            targets=tuple((a, "budget_usd") for a in study.budget_assets),
            config_help=BUDGET_HELP,
            config_default=NO_BUDGET,
        ),
        Option("no_models", "only the inputs job (no model calls)", flag=True),
    ) + (sequential_options() if study.sequential else ())


def sequential_options() -> tuple[Option, ...]:
    """``--sequential`` and ``--batch``: the options of a study that can stop a candidate once its
    verdict is certain (:attr:`Study.sequential`; :mod:`pipelines.sequential`)."""
    return (
        Option(
            "sequential",
            "generate in batches of --batch items (the sources' seeded order, up to --limit) and stop a "
            "candidate once an anytime-valid test has decided every blocking metric (docs/running.md)",
            flag=True,
        ),
        Option("batch", "items per batch of --sequential (>= 1; default 20)", positive),
    )


# ------------------------------------------------------------------------------------------
# Options: every option's value


class Options:
    """The values of every option of one study: the given ones, the others at their documented
    :attr:`Option.default`. Read as attributes (``options.k``); :attr:`given` holds the names given,
    :attr:`origins` where a given value came from when that was not the command line (option name →
    e.g. ``'pipelines/defs/mine/defs.yaml: models'``), for the errors about it.
    Built by :meth:`Study.values` or :meth:`Study.from_args`."""

    def __init__(self, study: Study, given: dict[str, Any], origins: Mapping[str, str] | None = None):
        names = {o.name: o for o in study.all_options()}
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise TypeError(f"{study.name} has no option(s) {unknown}; it has {sorted(names)}")
        self._study = study
        self._values = {n: (False if o.flag else o.default) for n, o in names.items()}
        self._values.update(given)
        self.given = frozenset(given)
        self.origins = {k: v for k, v in (origins or {}).items() if k in self.given}

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"Options({self._study.name}, {', '.join(f'{k}={self._values[k]!r}' for k in sorted(self.given))})"


# ------------------------------------------------------------------------------------------
# Card, Comparison: parts of a study


@dataclass(frozen=True)
class Card:
    """A study's rows of the robustness report card (:mod:`metamorph.report_card`).

    ``tables``: the warehouse tables (``<study>.<table>``, assets of the study) the rows are built
    from, passed positionally to ``rows``; ``rows(*frames)``: the builder, returning card rows
    (:data:`metamorph.report_card.CARD_ROW_COLUMNS`); ``optional``: those of ``tables`` it can do
    without (passed as ``None`` or empty: the study is on the card without them)."""

    tables: tuple[str, ...]
    rows: Callable[..., Any]
    optional: tuple[str, ...] = ()

    def __post_init__(self):
        extra = sorted(set(self.optional) - set(self.tables))
        if extra:
            raise ValueError(f"Card.optional names {extra}, which are not among its tables {list(self.tables)}")


@dataclass(frozen=True)
class Comparison:
    """What a study's upgrade verdicts are computed from (:func:`metamorph.verdict.sources`).

    ``tables``: the warehouse tables (``<study>.<table>``) passed positionally to ``scores``;
    ``scores(*frames)``: the item scores of every compared metric
    (:data:`metamorph.comparison.ITEM_SCORE_COLUMNS`); ``planned_cells(options, specs)`` (optional):
    the (metric, slice) cells a run of ``options`` will compare, with their items, for the
    detectable effects ``metamorph plan`` prints (:func:`metamorph.power.plan_lines`)."""

    tables: tuple[str, ...]
    scores: Callable[..., Any]
    planned_cells: Callable[[Any, Sequence[Any]], Any] | None = None


# ------------------------------------------------------------------------------------------
# Study


@dataclass(frozen=True)
class Study:
    """One study: everything the shared machinery needs, declared in its package's ``study.py``.

    * ``name``: the package under ``metamorph/studies/``, the Dagster asset group, the asset key
      prefix, ``assets/<name>.py`` and ``sql/<name>/``; ``title``: the paper's name (help groups);
    * ``inputs``: the unpartitioned input assets (the ``<name>_inputs_job``); ``source_asset``: the
      one that loads the sources (``--source``/``--limit``); ``generations``: the per-model
      generation asset whose materialization means "this model was evaluated" (it records the
      registry fingerprint); ``budget_assets``: the generation assets taking ``budget_usd``
      (default: ``generations``);
    * ``default_sources``: the sources when none is given; ``limit_rule``: how ``--limit`` picks rows;
      ``sources_help``, ``limit_help``: the launchpad's descriptions of the source asset's ``sources``
      and ``limit``; ``max_tokens_default``, ``max_tokens_help``: the default and description of the
      generation asset's ``max_tokens`` (:func:`common_options`: the command line's ``--max-tokens``
      leaves it at this default);
    * ``options``: the study's own :class:`Option` table (an option named like a common one replaces
      it, e.g. a tighter ``max_tokens`` range);
    * ``load_sources(specs, limit, **sampling)``: the study's loader (raises
      :class:`~metamorph.errors.InputError` naming file, row, field; ``limit`` None = every row),
      called through :meth:`load` by the source asset, the launch check, ``metamorph run`` and the
      plan; ``sampling``: the names of the source asset's options (besides ``sources`` and
      ``limit``) that choose its rows, passed to the loader as keywords (the format study's
      ``sample_seed``);
    * ``cost_steps(spec, options)``: the run's generation steps (:class:`metamorph.costplan.PlanStep`)
      for one model, for ``metamorph plan``; ``plan_notes(spec, options)`` (optional): lines
      ``metamorph plan`` prints before that model's counts (e.g. the requests an ingestion path cannot send);
    * ``headline(con, options) -> str``: the headline tables printed after a run (markdown);
      ``headline_without_models``: print them after ``--no-models`` too (deterministic tables);
    * ``card``: the study's report-card rows (:class:`Card`: their tables and builder);
    * ``sequential``: ``--sequential`` / ``--batch`` are offered (:func:`sequential_options`).
    * ``compared_metrics``: the metrics of the study's upgrade verdicts, each with whether a higher
      value is better (``{"accuracy": True}``); empty when the study has no verdicts. A registry
      entry's ``blocking_metrics`` names them. ``comparison``: how they are scored
      (:class:`Comparison`; :func:`metamorph.verdict.sources`), required with ``compared_metrics``;
    * ``lineage()`` (optional): metric → :class:`metamorph.trace.MetricTrace`, the rows behind a
      cell for ``metamorph trace`` (imported when called: loading the studies stays cheap);
    * ``commands()`` (optional): the study's own console commands, name → (help, description,
      add_arguments(parser), run(args) → exit code), as :mod:`metamorph.cli` collects them;
    * ``vocab``: the module declaring the study's vocabulary once (formats, modes, types …): the
      names it exports are what the study's modules, SQL and tests refer to (:meth:`vocabulary`);
    * ``sql_dir``: the study's SQL (:mod:`metamorph.sql`; default ``sql/<name>/``);
    * ``assets_module``: the dotted name of the Dagster project's module of the study's assets
      (default ``assets.<name>``; the library never imports it, the project's wiring does).
    """

    name: str
    title: str
    inputs: tuple[str, ...]
    source_asset: str
    generations: str
    default_sources: tuple[str, ...]
    load_sources: Callable[..., Any]
    cost_steps: Callable[[Any, Options], list]
    headline: Callable[[Any, Options], str]
    card: Card
    options: tuple[Option, ...] = ()
    budget_assets: tuple[str, ...] = ()
    limit_rule: str = "the first N"
    sources_help: str = "Source specs."
    limit_help: str = "Keep N ≥ 1 rows of each source; -1 = every row."
    max_tokens_default: int | None = None
    max_tokens_help: str = "Completion token limit (N ≥ 1)."
    headline_without_models: bool = False
    #: The study sends documents (ingestion paths), so a workflow under test (``http`` / ``python``
    #: registry entry) can take it; a study that sends prompts refuses such an entry at load.
    takes_documents: bool = False
    description: str = ""
    plan_notes: Callable[[Any, Options], list[str]] | None = None
    #: ``metamorph run <study> --sequential`` is supported: a growing ``--limit`` keeps the earlier
    #: items (the generation cache serves their calls again) and the study has
    #: ``compared_metrics`` (:func:`sequential_options`).
    sequential: bool = False
    compared_metrics: Mapping[str, bool] = field(default_factory=dict, hash=False)
    comparison: Comparison | None = None
    lineage: Callable[[], Mapping[str, Any]] | None = None
    commands: Callable[[], Mapping[str, tuple]] | None = None
    vocab: ModuleType | None = None
    sql_dir: Path | None = None
    assets_module: str = ""
    sampling: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.budget_assets:
            object.__setattr__(self, "budget_assets", (self.generations,))
        if self.sql_dir is None:
            object.__setattr__(self, "sql_dir", REPO_ROOT / "sql" / self.name)
        if not self.assets_module:
            object.__setattr__(self, "assets_module", f"assets.{self.name}")
        if not isinstance(self.card, Card):
            raise TypeError(f"study {self.name}: card must be a metamorph.study.Card, got {type(self.card).__name__}")
        if bool(self.compared_metrics) != (self.comparison is not None):
            raise TypeError(
                f"study {self.name}: compared_metrics and comparison go together (it compares "
                f"{sorted(self.compared_metrics)}; comparison is {'set' if self.comparison else 'not set'})"
            )

    def load(self, specs: Sequence[str], limit: int | None, **sampling: Any) -> list:
        """:attr:`load_sources` of ``specs`` (``limit`` None = every row; ``sampling``: the values of
        :attr:`sampling`, each at its option's default when not given), as a new list. Inside :func:`sources_loaded_once` the rows of the same
        study, specs, limit and sampling are loaded once and served again to every later call (the
        launch check then validates the very rows the source asset writes). Raises the loader's
        :class:`~metamorph.errors.InputError`."""
        unknown = sorted(set(sampling) - set(self.sampling))
        if unknown:
            raise TypeError(f"{self.name} samples its sources by {list(self.sampling)}, not {unknown}")
        sampling = {n: sampling[n] if n in sampling else self.option(n).default for n in self.sampling}
        key = (self.name, tuple(specs), limit, tuple(sorted(sampling.items())))
        memo = _LOADED[-1] if _LOADED else None
        if memo is not None and key in memo:
            return list(memo[key])
        rows = self.load_sources(list(specs), limit, **sampling)
        if memo is not None:
            memo[key] = rows
        return list(rows)

    def sources_of(self, options: Options) -> list:
        """:meth:`load` of the sources, limit and sampling options of ``options`` (a run's
        :class:`Options`). Raises what :meth:`load` raises; an :class:`InputError` about sources
        that came from elsewhere than the command line has their origin before it
        (``<defs.yaml>: sources: <file>, row 2, field 'question': …``, :attr:`Options.origins`)."""
        try:
            return self.load(options.sources, options.limit, **{n: getattr(options, n) for n in self.sampling})
        except InputError as exc:
            where = options.origins.get("sources")
            if where is None:
                raise
            raise InputError(f"{where}: {exc.source}", exc.problem, row=exc.row, field=exc.field) from None

    def vocabulary(self) -> dict[str, tuple[str, ...]]:
        """The study's named lists of words: every name of :attr:`vocab`'s ``__all__`` bound to a
        tuple of strings (``{"FORMATS": ("txt", "md", "json", "csv"), …}``); empty without a vocab."""
        if self.vocab is None:
            return {}
        return {
            name: value
            for name in self.vocab.__all__
            if isinstance(value := getattr(self.vocab, name), tuple) and all(isinstance(v, str) for v in value)
        }

    def common(self) -> tuple[Option, ...]:
        """:func:`common_options` of this study, minus those its own table replaces."""
        own = {o.name for o in self.options}
        return tuple(o for o in common_options(self) if o.name not in own)

    def all_options(self) -> tuple[Option, ...]:
        """The common options, then the study's own."""
        return (*self.common(), *self.options)

    def option(self, name: str) -> Option:
        """The option called ``name``; ``KeyError`` when there is none."""
        for o in self.all_options():
            if o.name == name:
                return o
        raise KeyError(f"{self.name} has no option {name!r}")

    def values(self, **given: Any) -> Options:
        """:class:`Options` with ``given`` and every other option at its default
        (``STUDY.values(k=2)``); ``TypeError`` for a name the study has no option for."""
        return Options(self, given)

    def from_args(self, args: argparse.Namespace) -> Options:
        """:class:`Options` of a parsed command line: the options given (not ``None``, not a flag left off)."""
        given = {o.name: getattr(args, o.name) for o in self.all_options()}
        return Options(self, {k: v for k, v in given.items() if v is not None and v is not False})

    def dropped_assets(self, options: Options) -> set[str]:
        """Assets left out of the model job by the flags set in ``options`` (:attr:`Option.drops_assets`)."""
        return {a for o in self.all_options() if o.drops_assets and getattr(options, o.name) for a in o.drops_assets}

    def ops_config(self, options: Options, assets: Collection[str]) -> dict[str, dict]:
        """The run config's ``ops`` for the given options, restricted to ``assets`` (names in the
        study's group) minus :meth:`dropped_assets`: ``{"<name>__<asset>": {"config": {field:
        value}}}``, only for options given (``None`` values left out: the asset's config default
        applies, which is the option's default)."""
        keep = set(assets) - self.dropped_assets(options)
        ops: dict[str, dict] = {}
        for o in self.all_options():
            if o.name not in options.given:
                continue
            value = getattr(options, o.name)
            if value is None:
                continue
            for asset, fld in o.targets:
                if asset in keep:
                    ops.setdefault(f"{self.name}__{asset}", {"config": {}})["config"][fld] = value
        return ops

    def target_assets(self) -> set[str]:
        """Every asset an option writes config to."""
        return {a for o in self.all_options() for a, _ in o.targets}

    def model_ops(self, options: Options) -> dict[str, dict]:
        """:meth:`ops_config` of the model job: the targets that are not :attr:`inputs`; the
        generation asset is always present (``{"config": {}}`` when no option reaches it)."""
        ops = self.ops_config(options, self.target_assets() - set(self.inputs))
        ops.setdefault(f"{self.name}__{self.generations}", {"config": {}})
        return ops

    def inputs_ops(self, options: Options) -> dict[str, dict]:
        """:meth:`ops_config` of the inputs job; the source asset always present."""
        ops = self.ops_config(options, self.inputs)
        ops.setdefault(f"{self.name}__{self.source_asset}", {"config": {}})
        return ops


#: The memos of :func:`sources_loaded_once`, innermost last (empty: every :meth:`Study.load` loads).
_LOADED: list[dict] = []


@contextlib.contextmanager
def sources_loaded_once():
    """Within the block, :meth:`Study.load` reads, parses and samples each study's sources once:
    the rows of the first call with the same specs, limit and sampling are served to every later
    one (the command's check, the launch check of a run made in this process, the source asset,
    the plan). Nested blocks share the outermost memo; it is dropped when that block ends, so
    changed files are read again by the next command."""
    _LOADED.append(_LOADED[-1] if _LOADED else {})
    try:
        yield
    finally:
        _LOADED.pop()


def _check(study: Study, module: str) -> Study:
    if not isinstance(study, Study):
        raise RuntimeError(f"{module}.STUDY is not a metamorph.study.Study")
    if study.name != module.split(".")[-2]:
        raise RuntimeError(f"{module}.STUDY is named {study.name!r}: a study is named like its package")
    return study


@functools.cache
def studies() -> dict[str, Study]:
    """Every study, by name: ``STUDY`` of each ``metamorph/studies/<pkg>/study.py``, sorted by name
    (a package without ``study.py`` is not a study). ``RuntimeError`` when a ``STUDY`` is not a
    :class:`Study` or is named unlike its package."""
    import metamorph.studies

    out = {}
    for m in sorted(pkgutil.iter_modules(metamorph.studies.__path__), key=lambda m: m.name):
        if not m.ispkg:
            continue
        module = f"metamorph.studies.{m.name}.study"
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        out[m.name] = _check(mod.STUDY, module)
    return out


def compared_metrics() -> dict[str, tuple[str, ...]]:
    """Study → the metrics its upgrade verdicts compare (:attr:`Study.compared_metrics`; the metrics
    a registry entry's ``blocking_metrics`` may name), for every study that has verdicts."""
    return {name: tuple(s.compared_metrics) for name, s in studies().items() if s.compared_metrics}


def get(name: str) -> Study:
    """The study called ``name``; :class:`ConfigError` naming the studies there are otherwise."""
    found = studies()
    if name not in found:
        raise ConfigError(f"no study {name!r}; the studies are {sorted(found)}")
    return found[name]


def chosen_models(specs: Sequence[Any], ids: Iterable[str] | None, where: str | None = None) -> list[Any]:
    """The registry entries ``ids`` names (all when ``None``), in registry order; an id may hold
    several separated by commas (``--models a,b`` as ``--models a b``: a registry id has no comma).
    Raises :class:`ConfigError` naming the unknown ids and the registry's, after ``where`` (where
    ``ids`` came from, e.g. a suite's ``'<defs.yaml>: models'``; :attr:`Options.origins`) when given."""
    if ids is None:
        return list(specs)
    ids = [part.strip() for i in ids for part in str(i).split(",")]
    unknown = sorted(set(ids) - {m.id for m in specs})
    if unknown:
        line = f"unknown model id(s) {unknown}; the registry has {[m.id for m in specs]}"
        raise ConfigError(f"{where}: {line}" if where else line)
    return [m for m in specs if m.id in ids]


# ------------------------------------------------------------------------------------------
# The command line: one sub-command per study


def add_study_commands(
    parser: argparse.ArgumentParser, extra: Callable[[argparse.ArgumentParser], None] | None = None
) -> None:
    """One sub-command of ``parser`` per study (positional ``study``), with the study's options in
    two groups: "common" and the study's title; ``extra(sub)`` adds a command's own options (those
    of ``metamorph plan``: ``--registry``, ``--cache``). Each sub-command's parser is of the class of
    ``parser`` (argparse's default), so a bad value is one line and exit 2 there too."""
    sub = parser.add_subparsers(dest="study", required=True, metavar="study")
    for name, study in studies().items():
        p = sub.add_parser(name, help=study.title, description=study.description or study.title)
        common = p.add_argument_group("common")
        common.add_argument(
            "--suite",
            default=None,
            help=f"a suite of {name} declared in pipelines/defs/<suite>/defs.yaml: its sources, options and "
            "models are the defaults, its own tables and jobs are used (default: the study's default suite)",
        )
        for o in study.common():
            o.add_to(common)
        if study.options:
            own = p.add_argument_group(study.title)
            for o in study.options:
                o.add_to(own)
        if extra is not None:
            extra(p)


__all__ = [
    "ALL_ROWS",
    "BUDGET_HELP",
    "Card",
    "Comparison",
    "Deferred",
    "NO_BUDGET",
    "Option",
    "Options",
    "Study",
    "add_study_commands",
    "budget",
    "check_value",
    "chosen_models",
    "common_options",
    "compared_metrics",
    "get",
    "positive",
    "seed",
    "sequential_options",
    "source_spec",
    "sources_loaded_once",
    "studies",
    "whole_number",
]
