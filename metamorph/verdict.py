"""Upgrade verdicts a team acts on: which regressions block, what to run when there is nothing to
compare, and the ``metamorph verdict`` command.

``metamorph verdict --model ID [--study S] [--suite NAME] [--json] [--warehouse PATH] [--registry PATH]``

Reads the study tables in the warehouse (read-only) — a study's default suite's (schema
``<study>``), or with ``--suite NAME`` that suite's (schema ``<suite>``, its study only;
:mod:`metamorph.suites`) — builds every study's item scores with the study's own scores
(:attr:`metamorph.study.Study.comparison`) and compares the candidate with the registry's approved
baseline (:func:`metamorph.comparison.compare_models`: paired bootstrap CI, exact McNemar or
sign-flip permutation test, Holm over the candidate's family within a study) — the computation
of each study's ``model_comparison`` asset, with its default settings. Exit code 0 when no row
regressed on a blocking metric, 1 when one did, 2 for bad input (unknown model, no approved
baseline, a study not run or a model not evaluated in it; one line on stderr saying what to run).

**Blocking metrics.** A regressed row blocks (fails the ``model_comparison`` asset's check
:data:`REGRESSION_CHECK`, and makes this command exit 1) when its metric may block for the
candidate: its registry entry's ``blocking_metrics`` (study → metrics; a study it does not name,
or an entry without the key, blocks on every compared metric of the study; ``[]`` never blocks).

Pure library: no Dagster.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from metamorph.comparison import compare_models, comparison_markdown
from metamorph.errors import ConfigError, MetamorphError
from metamorph.sql import open_read_only
from metamorph.study import compared_metrics

__all__ = [
    "COMMANDS",
    "EXIT_OK",
    "EXIT_REGRESSED",
    "EXIT_USAGE",
    "REGRESSION_CHECK",
    "REGRESSION_FIELDS",
    "REGRESSION_RECORD_KEYS",
    "RegressionCheck",
    "SEQUENTIAL_RUNS",
    "Verdict",
    "VerdictError",
    "VerdictSource",
    "add_arguments",
    "as_json",
    "blocking_mask",
    "blocks",
    "compared_metrics",
    "comparison_next_step",
    "format_text",
    "json_number",
    "model_job",
    "regression_check",
    "regression_records",
    "run",
    "sequential_line",
    "sequential_summary",
    "sources",
    "studies_to_run",
    "warehouse_verdict",
]

EXIT_OK, EXIT_REGRESSED, EXIT_USAGE = 0, 1, 2

#: Name of the asset check on every study's ``model_comparison``.
REGRESSION_CHECK = "no_blocking_regression"

#: Columns of a regressed row as the check's metadata and ``--json`` list it.
REGRESSION_FIELDS = ["candidate_id", "metric", "slice", "difference", "ci_low", "ci_high", "p_holm"]
#: The keys of a :func:`regression_records` record: the differences in percentage points.
REGRESSION_RECORD_KEYS = ["candidate_id", "metric", "slice", "difference_pp", "ci_low_pp", "ci_high_pp", "p_holm"]


@dataclass(frozen=True)
class VerdictSource:
    """What a study's verdicts are computed from: the warehouse tables (``<study>.<table>``),
    passed positionally to ``scores`` (→ item scores, :data:`metamorph.comparison.ITEM_SCORE_COLUMNS`),
    and each compared metric's direction (True: higher is better)."""

    tables: tuple[str, ...]
    scores: Callable[..., pd.DataFrame]
    directions: Mapping[str, bool]


def sources() -> dict[str, VerdictSource]:
    """Study → :class:`VerdictSource`, for every study (:func:`metamorph.study.studies`) that has
    :attr:`~metamorph.study.Study.compared_metrics`: the tables and the scoring function of its
    :attr:`~metamorph.study.Study.comparison` (a study declares both or neither)."""
    from metamorph.study import studies

    return {
        name: VerdictSource(tuple(study.comparison.tables), study.comparison.scores, dict(study.compared_metrics))
        for name, study in studies().items()
        if study.comparison is not None
    }


def model_job(study: str, suite: str | None = None) -> str:
    """The job that evaluates one model partition in ``study``'s suite ``suite`` (None: the study's
    default suite) and rebuilds its verdicts."""
    return f"{suite or study}_model_job"


def _run_line(study: str, suite: str | None) -> str:
    """``metamorph run <study>`` with ``--suite`` when ``suite`` is not the study's default suite."""
    return f"metamorph run {study}" + (f" --suite {suite}" if suite not in (None, study) else "")


def _partitions(ids: Sequence[str], study: str, suite: str | None = None) -> str:
    """``ids`` and the job that evaluates them, with the same run on the command line."""
    where = "its partition" if len(ids) == 1 else "their partitions"
    return (
        f"{', '.join(ids)} — run `{model_job(study, suite)}` for {where} "
        f"(command line: `{_run_line(study, suite)} --models {' '.join(ids)}`)"
    )


# ------------------------------------------------------------------ blocking


def blocks(spec, study: str, metric: str) -> bool:
    """Whether a regression of ``metric`` in ``study`` blocks for registry entry ``spec``
    (a :class:`~metamorph.models.ModelSpec`; None — an id no longer registered — blocks)."""
    chosen = getattr(spec, "blocking_metrics", None)
    if chosen is None or study not in chosen:
        return True
    return metric in chosen[study]


def blocking_mask(comparison: pd.DataFrame, models: Sequence, study: str) -> pd.Series:
    """Per row of a comparison (:data:`~metamorph.comparison.COMPARISON_COLUMNS`): True when its
    metric may block for its candidate (:func:`blocks`)."""
    by_id = {m.id: m for m in models}
    return pd.Series(
        [blocks(by_id.get(c), study, m) for c, m in zip(comparison["candidate_id"], comparison["metric"])],
        index=comparison.index,
        dtype=bool,
    )


def regression_records(rows: pd.DataFrame) -> list[dict]:
    """Regressed rows (``rows``: :data:`REGRESSION_FIELDS`, differences as fractions) as plain
    records of :data:`REGRESSION_RECORD_KEYS`, rounded as :func:`~metamorph.comparison.comparison_markdown`
    prints them: ``difference_pp``, ``ci_low_pp``, ``ci_high_pp`` — candidate − baseline in
    percentage points to :data:`~metamorph.export.PCT_DECIMALS` decimal (−0.13000000000000003 →
    −13.0) — and ``p_holm`` to :data:`~metamorph.comparison.P_DIGITS` significant digits
    (0.0234375 → 0.0234). A missing value (NaN) is None."""
    from metamorph.comparison import P_DIGITS
    from metamorph.export import display_float

    def num(v, percent: bool):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        return display_float(100 * float(v), True) if percent else display_float(float(v), False, P_DIGITS)

    return [
        {
            "candidate_id": r.candidate_id,
            "metric": r.metric,
            "slice": r.slice,
            "difference_pp": num(r.difference, True),
            "ci_low_pp": num(r.ci_low, True),
            "ci_high_pp": num(r.ci_high, True),
            "p_holm": num(r.p_holm, False),
        }
        for r in rows[REGRESSION_FIELDS].itertuples(index=False)
    ]


@dataclass(frozen=True)
class RegressionCheck:
    """The outcome of :func:`regression_check`: ``passed``, the regressed rows that block and
    those whose metric does not block (:data:`~metamorph.comparison.COMPARISON_COLUMNS`), and a
    one-line ``summary``."""

    passed: bool
    blocking: pd.DataFrame
    not_blocking: pd.DataFrame
    summary: str


def regression_check(comparison: pd.DataFrame, models: Sequence, study: str) -> RegressionCheck:
    """Whether any candidate regressed (verdict ``regressed``, i.e. after Holm) on a metric that
    may block for it (:func:`blocks`); ``comparison`` is a study's ``model_comparison``."""
    regressed = comparison[comparison["verdict"] == "regressed"]
    mask = blocking_mask(regressed, models, study) if len(regressed) else pd.Series(dtype=bool)
    blocking, other = (regressed[mask], regressed[~mask]) if len(regressed) else (regressed, regressed)
    if len(blocking):
        cands = sorted(set(blocking["candidate_id"]))
        summary = f"{len(blocking)} regressed row(s) on blocking metrics: " + "; ".join(
            f"{c} ({', '.join(sorted(set(blocking.loc[blocking['candidate_id'] == c, 'metric'])))})" for c in cands
        )
    else:
        summary = "no candidate regressed on a blocking metric"
        if len(other):
            summary += f" ({len(other)} regressed row(s) on metrics that do not block)"
    return RegressionCheck(not len(blocking), blocking, other, summary)


# ------------------------------------------------------------------ empty states


def comparison_next_step(study: str, models: Sequence, evaluated: set[str]) -> str | None:
    """What a study's comparison lacks, naming the job to run, or None when the approved baseline
    and every registered candidate have been evaluated. ``evaluated``: the model ids with item
    scores in the study.

    E.g. ``candidates registered but not evaluated: gemma3-270m, smollm2-greedy — run
    `<study>_model_job` for their partitions (command line: `metamorph run <study> --models
    gemma3-270m smollm2-greedy`)``.
    """
    from metamorph.models import approved_baseline

    source = next((m.source for m in models if m.source), "the registry")
    try:
        baseline = approved_baseline(list(models)).id
    except ConfigError:  # the registry refuses a second approved entry: none is approved
        return f"no approved baseline (no entry has `status: approved`): set it on exactly one entry of {source}"
    candidates = [m.id for m in models if m.status == "candidate"]
    parts = []
    if baseline not in evaluated:
        parts.append("approved baseline not evaluated: " + _partitions([baseline], study))
    if not candidates:
        parts.append(
            f"no candidate registered: add an entry to {source} (status: candidate is the default), then "
            f"run `{model_job(study)}` for its partition"
        )
    missing = [c for c in candidates if c not in evaluated]
    if missing:
        parts.append(
            f"candidate{'s' if len(missing) > 1 else ''} registered but not evaluated: " + _partitions(missing, study)
        )
    return "; ".join(parts) or None


def studies_to_run(missing: Sequence[str]) -> str | None:
    """The report card's empty state: the studies without card rows and the jobs that make them
    (None when none is missing)."""
    if not missing:
        return None
    jobs = ", ".join(f"`{s}_inputs_job` then `{model_job(s)}`" for s in missing)
    return (
        f"not in the card: {', '.join(missing)} — run {jobs} for the registered models' partitions, "
        "then `model_upgrades_job`"
    )


# ------------------------------------------------------------------ the verdict from the warehouse


class VerdictError(MetamorphError, ValueError):
    """Bad input to :func:`warehouse_verdict`: one line saying what is missing and what to run."""


@dataclass
class Verdict:
    """A candidate against the approved baseline across studies.

    Attributes:
        candidate, baseline: model ids.
        comparison: :data:`~metamorph.comparison.COMPARISON_COLUMNS` plus ``study`` and ``blocks``
            (whether the row's metric may block for the candidate), one row per study × metric × slice.
        skipped: study → why it was not compared (what to run), for studies left out.
        sequential: study → the candidate's last ``metamorph run <study> --sequential``
            (:func:`sequential_summary`), for studies whose compared items are those of that run.
        suites: study → the suite whose tables were read, for a study not read from its default suite.
    """

    candidate: str
    baseline: str
    comparison: pd.DataFrame
    skipped: dict[str, str] = field(default_factory=dict)
    sequential: dict[str, dict] = field(default_factory=dict)
    suites: dict[str, str] = field(default_factory=dict)

    @property
    def regressions(self) -> pd.DataFrame:
        """The rows that regressed on a blocking metric."""
        c = self.comparison
        return c[(c["verdict"] == "regressed") & c["blocks"]]

    @property
    def exit_code(self) -> int:
        """1 when a row regressed on a blocking metric, else 0."""
        return EXIT_REGRESSED if len(self.regressions) else EXIT_OK


def _read(con, schema: str, table: str) -> pd.DataFrame | None:
    n = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?", [schema, table]
    ).fetchall()[0][0]
    return con.execute(f'SELECT * FROM "{schema}"."{table}"').df() if n else None


def _not_evaluated(study: str, absent: Sequence[str], frames: Sequence[pd.DataFrame], suite: str | None = None) -> str:
    """Why ``absent`` models have no item score in ``study``: never run (the job to run for their
    partitions), or run with no measurable item — their rows are in the study's tables, but every
    call failed at the provider or was not sent, and a failed call is never scored."""
    present = set().union(*(set(f["model_id"]) for f in frames if "model_id" in f.columns))
    ran = [m for m in absent if m in present]
    never = [m for m in absent if m not in present]
    where = study if suite in (None, study) else f"{study} (suite {suite})"
    parts = [f"not evaluated in {where}: " + _partitions(never, study, suite)] if never else []
    if ran:
        parts.append(
            f"run in {where} but no item was measurable for {', '.join(ran)}: every call failed at the provider "
            "or was not sent (the generation table's `error` column says why); fix that, then run "
            f"`{_run_line(study, suite)} --models {' '.join(ran)}` again (only the failed calls are made)"
        )
    return "; ".join(parts)


def warehouse_verdict(
    warehouse: str | Path,
    models: Sequence,
    candidate: str,
    studies: Sequence[str] | None = None,
    *,
    alpha: float = 0.05,
    n_resamples: int = 2000,
    seed: int = 0,
    power: float = 0.8,
    suites: Mapping[str, str] | None = None,
) -> Verdict:
    """The verdict table of ``candidate`` against the registry's approved baseline, from the
    study tables in ``warehouse`` (opened read-only).

    Args:
        models: the registry entries (:func:`metamorph.models.load_registry`).
        studies: studies to compare in (default: every study; those not run, or where either model
            was not evaluated, are skipped and listed in :attr:`Verdict.skipped`).
        alpha: as the ``model_comparison`` assets' default.
        n_resamples: as the ``model_comparison`` assets' default.
        seed: as the ``model_comparison`` assets' default.
        power: the power of each row's minimum detectable effect, as the assets' default.
        suites: study → the suite whose tables are read (its warehouse schema); a study not named
            reads its default suite's (schema ``<study>``).

    Raises:
        VerdictError: ``candidate`` not in the registry or the baseline itself; no (or more than one)
            approved entry; no warehouse file; an unknown study; a requested study not run or a
            model not evaluated in it; with every study, none in which both models were evaluated.
    """

    from metamorph.models import approved_baseline

    source = next((m.source for m in models if m.source), "the registry")
    ids = [m.id for m in models]
    if candidate not in ids:
        raise VerdictError(
            f"model {candidate!r} is not in the registry {source} (registered: {', '.join(ids)}); add "
            "its entry there, then run the studies' model jobs for its partition"
        )
    try:
        baseline = approved_baseline(list(models)).id
    except ConfigError:
        raise VerdictError(comparison_next_step("", models, set())) from None
    if candidate == baseline:
        others = [m.id for m in models if m.status == "candidate"]
        raise VerdictError(f"{candidate} is the approved baseline; name a candidate ({', '.join(others) or 'none'})")
    known = sources()
    wanted = list(studies) if studies else sorted(known)
    unknown = [s for s in wanted if s not in known]
    if unknown:
        raise VerdictError(f"unknown study {unknown[0]!r} (studies: {', '.join(sorted(known))})")
    path = Path(warehouse)
    if not path.exists():
        raise VerdictError(
            f"no warehouse {path}: run `{model_job(wanted[0])}` for partitions {baseline}, {candidate} "
            f"(after `{wanted[0]}_inputs_job`)"
        )
    by_id = {m.id: m for m in models}
    chosen = {s: (suites or {}).get(s, s) for s in wanted}
    parts, skipped, sequential = [], {}, {}
    con = open_read_only(path, VerdictError)
    try:
        for s in wanted:
            src, schema = known[s], chosen[s]
            frames = [_read(con, schema, t) for t in src.tables]
            if any(f is None or f.empty for f in frames):
                what = s if schema == s else f"{s} (suite {schema})"
                skipped[s] = (
                    f"{what} has not been run: run `{schema}_inputs_job`, then `{model_job(s, schema)}` for "
                    f"partitions {baseline}, {candidate}"
                )
                continue
            scores = src.scores(*frames)
            evaluated = set(scores["model_id"])
            absent = [m for m in (baseline, candidate) if m not in evaluated]
            if absent:
                skipped[s] = _not_evaluated(s, absent, frames, schema)
                continue
            cmp = compare_models(
                scores,
                baseline,
                src.directions,
                candidates=[candidate],
                alpha=alpha,
                n_resamples=n_resamples,
                seed=seed,
                power=power,
            )
            cmp.insert(0, "study", s)
            cmp["blocks"] = [blocks(by_id[candidate], s, m) for m in cmp["metric"]]
            parts.append(cmp)
            seq = sequential_summary(con, s, candidate, cmp)
            if seq is not None:
                sequential[s] = seq
    finally:
        con.close()
    if studies and skipped:
        raise VerdictError(next(iter(skipped.values())))
    if not parts:
        raise VerdictError(
            f"{candidate} has not been compared with {baseline} in any study: " + "; ".join(skipped.values())
        )
    suites_read = {s: chosen[s] for s in wanted if chosen[s] != s}
    return Verdict(candidate, baseline, pd.concat(parts, ignore_index=True), skipped, sequential, suites_read)


#: The warehouse table of the sequential runs (written by ``metamorph run <study> --sequential``).
SEQUENTIAL_RUNS = ("metamorph_meta", "sequential_runs")


def sequential_summary(con, study: str, candidate: str, comparison: pd.DataFrame) -> dict | None:
    """The candidate's last sequential run of ``study`` (rows of :data:`SEQUENTIAL_RUNS`), or None
    when there is none or its items are not those compared now (a later run changed them): every
    (metric, slice) of the sequential rows has the same ``n_items`` in ``comparison``.

    Returns ``{"stopped_after": int | None, "plan_items", "alpha", "blocking_rows", "decided",
    "calls_planned", "calls_saved", "rows": [{metric, slice, test, e_max, p_anytime, verdict}]}``."""
    rows = _read(con, *SEQUENTIAL_RUNS)
    if rows is None:
        return None
    rows = rows[(rows["study"] == study) & (rows["candidate_id"] == candidate)]
    if rows.empty:
        return None
    now = comparison.set_index(["metric", "slice"])["n_items"]
    for r in rows.itertuples():
        if (r.metric, r.slice) not in now.index or int(now.loc[(r.metric, r.slice)]) != int(r.n_items):
            return None
    first = rows.iloc[0]
    block = rows[rows["blocks"].astype(bool)]
    stopped = first["stopped_after"]
    return {
        "stopped_after": None if pd.isna(stopped) else int(stopped),
        "plan_items": int(first["plan_items"]),
        "alpha": float(first["alpha"]),
        "blocking_rows": int(len(block)),
        "decided": int(block["decided"].astype(bool).sum()),
        "calls_planned": int(first["calls_planned"]),
        "calls_saved": int(first["calls_saved"]),
        "rows": [
            {
                "metric": r.metric,
                "slice": r.slice,
                "test": r.test,
                "e_max": float(r.e_max),
                "p_anytime": float(r.p_anytime),
                "verdict": r.verdict,
            }
            for r in rows.itertuples()
        ],
    }


def sequential_line(seq: dict) -> str:
    """``sequential run: stopped after 20 of 60 items (anytime-valid test, α = 0.05, Holm over the
    blocking rows); 3 of 3 blocking rows decided; 80 of 120 calls saved``."""
    where = (
        f"stopped after {seq['stopped_after']} of {seq['plan_items']} items"
        if seq["stopped_after"] is not None
        else f"ran the whole plan of {seq['plan_items']} items"
    )
    return (
        f"sequential run: {where} (anytime-valid test, α = {seq['alpha']:g}, Holm over the blocking rows); "
        f"{seq['decided']} of {seq['blocking_rows']} blocking rows decided; "
        f"{seq['calls_saved']} of {seq['calls_planned']} calls saved"
    )


def format_text(v: Verdict) -> str:
    """The verdict as terminal text: per study the regressions-first table, then the skipped studies
    and one last line ``REGRESSED: …`` or ``no blocking regression``."""
    lines = [f"candidate {v.candidate} against the approved baseline {v.baseline}"]
    for s, part in v.comparison.groupby("study", sort=True):
        title = f"{s} (suite {v.suites[s]})" if s in v.suites else s
        lines += ["", f"## {title}", comparison_markdown(part.drop(columns=["study", "blocks"]))]
        if s in v.sequential:
            lines.append(sequential_line(v.sequential[s]))
        quiet = sorted(set(part.loc[~part["blocks"], "metric"]))
        if quiet:
            lines.append(f"(metrics that do not block for {v.candidate}: {', '.join(quiet)})")
    for s, why in v.skipped.items():
        lines += ["", f"skipped {s}: {why}"]
    reg = v.regressions
    lines.append("")
    if len(reg):
        lines.append(
            f"REGRESSED: {len(reg)} row(s) on blocking metrics: "
            + "; ".join(
                f"{r.study} {r.metric} ({r.slice}) {100 * r.difference:+.1f} pp, p (Holm) {r.p_holm:.3g}"
                for r in reg.itertuples()
            )
        )
    else:
        lines.append("no blocking regression")
    return "\n".join(lines)


#: Columns of a comparison row that are fractions the verdict table shows in percentage points
#: (``--json`` keeps them fractions, rounded to what the table shows: 0.1 pp = 3 decimals).
_PP_COLUMNS = frozenset({"baseline_mean", "candidate_mean", "difference", "ci_low", "ci_high", "mde"})
#: Columns that are p-values (``--json``: :data:`~metamorph.comparison.P_DIGITS` significant digits).
_P_COLUMNS = frozenset({"p_value", "p_holm", "p_anytime"})


def json_number(column: str, value):
    """``value`` of ``column`` as ``--json`` prints it, rounded as the verdict table shows it: a
    fraction shown in percentage points (:data:`_PP_COLUMNS`) to 0.1 pp (−0.13000000000000003 →
    −0.13, 0.30555555555555554 → 0.306), a p-value to :data:`~metamorph.comparison.P_DIGITS`
    significant digits (0.005859375 → 0.00586), any other float to
    :data:`~metamorph.export.FLOAT_DIGITS` significant digits; NaN is None; anything that is not a
    float (an int, a text, a bool) unchanged."""
    from metamorph.comparison import P_DIGITS
    from metamorph.export import PCT_DECIMALS, display_float

    if isinstance(value, bool) or not isinstance(value, float):
        return value
    if math.isnan(value):
        return None
    if column in _PP_COLUMNS:
        return round(display_float(100 * value, True) / 100, PCT_DECIMALS + 2)
    if column in _P_COLUMNS:
        return display_float(value, False, P_DIGITS)
    return display_float(value, False)


def as_json(v: Verdict) -> dict:
    """The verdict as one JSON-ready object: candidate, baseline, ``regressed`` (bool), the
    blocking regressions (:data:`REGRESSION_FIELDS` + study), every row, the skipped studies and the sequential runs
    (:func:`sequential_summary`, per study) and, when a study was read from another suite than its
    default one, ``suites`` (study → suite). Every float is rounded as the verdict table shows it
    (:func:`json_number`); the keys are the table's columns."""

    def clean(records):
        return [{k: json_number(k, x) for k, x in r.items()} for r in records]

    reg = v.regressions
    sequential = {
        s: {**seq, "rows": clean(seq["rows"])} if isinstance(seq, dict) and "rows" in seq else seq
        for s, seq in v.sequential.items()
    }
    return {
        "candidate": v.candidate,
        "baseline": v.baseline,
        "regressed": bool(len(reg)),
        "blocking_regressions": clean(reg[["study", *REGRESSION_FIELDS]].to_dict("records")),
        "rows": clean(v.comparison.to_dict("records")),
        "skipped": v.skipped,
        "sequential": sequential,
        **({"suites": v.suites} if v.suites else {}),
    }


# ------------------------------------------------------------------ the command


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``metamorph verdict``."""
    p.add_argument("--model", required=True, help="The candidate (registry id).")
    p.add_argument(
        "--study",
        action="append",
        default=None,
        choices=sorted(sources()),
        help="Only this study (repeatable; default: every study the two models were evaluated in).",
    )
    p.add_argument(
        "--suite",
        default=None,
        help="A suite (pipelines/defs/<suite>/defs.yaml): its study is compared from the suite's warehouse "
        "tables (with --study: a suite of that study; default: each study's default suite).",
    )
    p.add_argument("--json", action="store_true", help="One JSON object on stdout.")
    p.add_argument(
        "--warehouse",
        default=None,
        help="The DuckDB warehouse (default: $METAMORPH_HOME/metamorph.duckdb, "
        "else data/metamorph.duckdb); opened read-only.",
    )
    p.add_argument(
        "--registry", default=None, help="The model registry (default: $METAMORPH_MODELS, else config/models.yaml)."
    )


def run(args: argparse.Namespace) -> int:
    """Run ``metamorph verdict``: exit 0 (no blocking regression), 1 (one or more), or 2 with one
    line on stderr (:class:`VerdictError`, or an invalid registry)."""
    from metamorph.costplan import default_registry
    from metamorph.models import load_registry
    from metamorph.trace import default_warehouse

    from metamorph.suites import suite_schema, suite_studies

    try:
        studies, suites = args.study, None
        if args.suite is not None:
            if studies is None:  # the suite's own study
                known = suite_studies()
                if args.suite not in known:
                    raise ConfigError(f"--suite {args.suite!r}: no such suite; the suites are {sorted(known)}")
                studies = [known[args.suite]]
            if len(studies) != 1:
                raise ConfigError(f"--suite {args.suite!r}: a suite is of one study; give one --study, not {studies}")
            suites = {studies[0]: suite_schema(studies[0], args.suite)}
        models = load_registry(args.registry or default_registry())
        v = warehouse_verdict(args.warehouse or default_warehouse(), models, args.model, studies, suites=suites)
    except (VerdictError, ConfigError) as exc:
        print(f"metamorph verdict: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(as_json(v), ensure_ascii=False, indent=1) if args.json else format_text(v))
    return v.exit_code


COMMANDS = {
    "verdict": (
        "Print a candidate's upgrade verdicts against the approved baseline; exit 1 when one regressed.",
        "\n\n".join(__doc__.split("\n\n")[1:3]) if __doc__ else None,
        add_arguments,
        run,
    )
}
