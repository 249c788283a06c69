"""Metrics of the document-format robustness study.

Paper: "Not as Sweet by Another Name: An Empirical Study of Format Robustness in LLM
Document Workflows" (ASE '26). A record (*instance*) is rendered in several formats (txt,
md, json, csv; TXT is the baseline) and each rendering is given to a *workflow* (provider +
model + ingestion path) ``k`` times (repeats ``r = 1..k``). The unit of the violation rates,
the flip rate, the affirmative rates of the fairness scores (:mod:`.fairness`) and the
across-format tests (:mod:`.analysis`) is the *group* (instance, r) of §5.2 — the r-th response
of every format (:func:`mr_flags`); rates resample instances for their CIs
(``unit="instance_repeat1"`` keeps the earlier repeat-1 reading). Where the paper is ambiguous the
reading that reproduces its own tables is taken and named in the function's docstring.

Input: the generations frame
----------------------------
One row per generation, columns :data:`GENERATION_COLUMNS`:
``workflow_id`` str, ``dataset`` str, ``instance_id`` str, ``format`` str, ``repeat`` int
(1..k), ``decision`` str or None (None = unparseable, written ⊥), ``gold`` str or None,
``is_correct`` bool (meaningless when gold is None), ``categories`` list[str] (evidence
categories of the generation; may be empty; ``None`` is read as empty), ``favorable`` bool
or None (decision == the dataset's favourable label; None when unparseable). Optional:
``call_error`` bool (the call failed at the provider; absent = False), ``not_sent`` bool (the
request was never sent: its ingestion path cannot take the format; a ``call_error`` too; absent =
False).

:func:`validate_generations` checks it (every public function calls it): missing columns,
missing keys, duplicate ``(workflow_id, dataset, instance_id, format, repeat)``, repeats
that are not exactly ``1..k`` for an (instance, format), or different ``k`` across the
formats of one instance raise :class:`ValueError` naming the problem. No row is dropped
silently: a function that uses a subset (e.g. rows with gold) says so in its docstring.

Conventions shared by all functions
-----------------------------------
* ⊥ is its own outcome everywhere decisions are compared (⊥ vs a label differ, ⊥ vs ⊥
  agree) — MR1, MR3/S_f, Stb_f, flip rate, vote aggregation.
* A relation needs a pair: an instance rendered in fewer than 2 formats has null MR flags
  and is counted in ``n_undefined``, never in a violation rate.
* A failed call (``call_error``) is not a reply: it is never ⊥, never a decision. Every metric
  leaves it out of its numerator and its denominator, with the unit that needs it: the generation
  (accuracy), the (instance, format) cell (Stb_f), the group (MR1, MR2, flip rate) or the instance
  (MR3). Each table counts what it left out (``n_call_errors``) and a value with nothing left to
  measure is null with ``not_measurable`` saying why (:func:`not_measurable_reason`).
* Percentages are in percent (0–100); differences of percentages in percentage points.
* Output rows are sorted by workflow_id, dataset, (instance_id), then format in the
  order txt, md, json, csv, then any other format alphabetically (:data:`FORMAT_ORDER`).
* Every output is validated by its schema in :mod:`metamorph.studies.format_robustness.schemas`.
"""

from __future__ import annotations

import itertools
import math
import numpy as np
import pandas as pd

from metamorph import stats
from metamorph.measurability import every_call_failed, no_reply_parsed
from metamorph.ordering import LevelOrder
from metamorph.schemas import require_columns
from metamorph.sql import run_sql
from metamorph.studies.format_robustness.schemas import (
    AccuracyByFormat,
    EvidenceDrift,
    MRFlags,
    MRViolations,
    SilentViolations,
    StabilityByFormat,
)
from metamorph.studies.format_robustness.vocab import BASELINE_FORMAT, FORMATS, MR_UNITS, RELATIONS

__all__ = [
    "GENERATION_COLUMNS",
    "FORMAT_ORDER",
    "BASELINE_FORMAT",
    "MR2_THETA",
    "validate_generations",
    "mr_flags",
    "mr_violations",
    "accuracy_by_format",
    "stability_by_format",
    "instance_stability",
    "STABILITY_COLUMNS",
    "evidence_drift",
    "flip_pairs",
    "flipped_groups",
    "silent_violations",
    "MR_UNITS",
    "BOTTOM",
    "INSTANCE_KEYS",
    "WORKFLOW_KEYS",
    "accuracy_rows",
    "drift_rows",
    "ordered_formats",
    "pct_or_nan",
    "sort_rows",
    "stability_rows",
    "unit_rows",
    "validate_flags",
    "NOT_MEASURABLE_DETERMINISTIC",
    "not_measurable_reason",
    "NOT_MEASURABLE_ONE_REPEAT",
    "repeats_not_measurable",
    "single_repeat_workflows",
    "shared_repeat_workflows",
]

#: Columns of the generations frame (the input contract).
GENERATION_COLUMNS = (
    "workflow_id",
    "dataset",
    "instance_id",
    "format",
    "repeat",
    "decision",
    "gold",
    "is_correct",
    "categories",
    "favorable",
)

#: Baseline-first format order, used for sorting and for routing ties (:data:`.vocab.FORMATS`).
FORMAT_ORDER = FORMATS

#: MR2 threshold θ on the Jaccard similarity of evidence-category sets (§4.1).
MR2_THETA = 0.3

#: The key of one evaluated series: a workflow on a dataset.
WORKFLOW_KEYS = ["workflow_id", "dataset"]

#: The key of one instance of a series.
INSTANCE_KEYS = ["workflow_id", "dataset", "instance_id"]

_GEN_KEY = ["workflow_id", "dataset", "instance_id", "format", "repeat"]

#: Stand-in for ⊥ in the ``_dec`` column so that ⊥ compares as its own value (never a real label).
BOTTOM = "\u22a5\x00unparseable"


def _as_categories(value: object, row: int) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, float) and math.isnan(value):
        return ()
    if isinstance(value, str):
        raise ValueError(f"generations: row {row}: 'categories' must be a list of strings, got the string {value!r}")
    if isinstance(value, (list, tuple, set, frozenset, np.ndarray, pd.Series)):
        return tuple(str(c) for c in value)
    raise ValueError(f"generations: row {row}: 'categories' must be a list of strings, got {type(value).__name__}")


_LEVELS = LevelOrder("format", FORMAT_ORDER)

_format_key = _LEVELS.key

#: The given formats in canonical order (:data:`FORMAT_ORDER`, then any other format alphabetically).
ordered_formats = _LEVELS.ordered

#: Rows sorted by the given key columns, ``format`` in canonical order.
sort_rows = _LEVELS.sort


def validate_generations(gen: pd.DataFrame) -> pd.DataFrame:
    """Check the generations frame and return a normalised copy (the input is not modified).

    Adds three internal columns: ``_dec`` (decision with ⊥ replaced by a private sentinel, so
    ⊥ compares as its own value), ``_cats`` (tuple of category strings; ``None``/NaN ->
    empty) and ``_err`` (the call failed: the optional ``call_error`` column, False when absent;
    such a row's ``_dec`` is None: no outcome, so a comparison that needs it is not made). ``repeat`` becomes int,
    ``is_correct`` bool where gold exists.

    Raises:
        ValueError: missing columns (named); null keys; non-integer or < 1 repeats;
            duplicate generation keys; repeats of an (instance, format) other than exactly
            1..k; different k across the formats of one instance; null ``is_correct`` where
            gold exists; ``categories`` that is not a list of strings.
    """
    require_columns(gen, GENERATION_COLUMNS, "generations")
    g = gen.copy()
    for col in ("workflow_id", "dataset", "instance_id", "format", "repeat"):
        n_null = int(g[col].isna().sum())
        if n_null:
            raise ValueError(f"generations: column '{col}' has {n_null} null value(s)")
    for col in ("workflow_id", "dataset", "instance_id", "format"):
        g[col] = g[col].astype(str)
    rep = pd.to_numeric(g["repeat"], errors="coerce")
    if rep.isna().any() or (rep != np.floor(rep)).any() or (rep < 1).any():
        raise ValueError("generations: 'repeat' must be integers >= 1 (1..k)")
    g["repeat"] = rep.astype(int)
    dup = g.duplicated(_GEN_KEY, keep=False)
    if dup.any():
        first = g.loc[dup, _GEN_KEY].iloc[0].to_dict()
        raise ValueError(f"generations: {int(dup.sum())} rows share a generation key, e.g. {first}")
    if len(g):
        cell = g.groupby(INSTANCE_KEYS + ["format"], sort=False)["repeat"].agg(["size", "min", "max"])
        bad = cell[(cell["min"] != 1) | (cell["max"] != cell["size"])]
        if len(bad):
            raise ValueError(
                f"generations: repeats must be exactly 1..k per (instance, format); "
                f"{len(bad)} cell(s) are not, e.g. {dict(zip(INSTANCE_KEYS + ['format'], bad.index[0]))}"
            )
        ks = cell["size"].groupby(level=INSTANCE_KEYS, sort=False).nunique()
        if (ks > 1).any():
            raise ValueError(
                "generations: the formats of an instance must have the same number of repeats k; "
                f"{int((ks > 1).sum())} instance(s) do not, e.g. {dict(zip(INSTANCE_KEYS, ks[ks > 1].index[0]))}"
            )
    has_gold = g["gold"].notna()
    g["_err"] = g["call_error"].fillna(False).astype(bool) if "call_error" in g.columns else False
    g["_unsent"] = g["not_sent"].fillna(False).astype(bool) if "not_sent" in g.columns else False
    if (g["_unsent"] & ~g["_err"]).any():
        raise ValueError("generations: a row with not_sent is not a call_error")
    if g.loc[has_gold & ~g["_err"], "is_correct"].isna().any():
        raise ValueError("generations: 'is_correct' is null on rows that have gold")
    if (g["_err"] & g["decision"].notna()).any():
        raise ValueError("generations: a row with call_error has a decision")
    parseable = g["decision"].notna()
    g["_dec"] = g["decision"].where(parseable, BOTTOM).map(lambda d: d if d == BOTTOM else str(d))
    g.loc[g["_err"], "_dec"] = None  # a failed call: no outcome at all, never ⊥
    g["_cats"] = [_as_categories(v, i) for i, v in enumerate(g["categories"].tolist())]
    return g


def validate_flags(flags: pd.DataFrame) -> pd.DataFrame:
    """A copy of the MR flags with ``mr1`` / ``mr2`` / ``mr3`` as nullable booleans.

    Raises:
        ValueError: a missing column (named).
    """
    require_columns(flags, ["workflow_id", "dataset", "instance_id", "mr1", "mr2", "mr3"], "flags")
    f = flags.copy()
    for c in ("mr1", "mr2", "mr3"):
        f[c] = pd.array(f[c].tolist(), dtype="boolean")
    return f


def not_measurable_reason(
    n_calls: int, n_call_errors: int, n_parsed: int | None = None, n_not_sent: int = 0
) -> str | None:
    """Why a quantity over ``n_calls`` generations has nothing to measure, or None when it has.

    ``"not measurable: every call failed (N of N)"`` when every call failed — ``"not measurable: not
    sent (N of N requests)"`` when none was sent, and ``"… every call failed or was not sent (F
    failed, S not sent, of N)"`` for both, ``n_not_sent`` of the ``n_call_errors`` being requests
    never sent (:func:`metamorph.measurability.every_call_failed`); with ``n_parsed``
    given, ``"not measurable: no reply parsed (M of M unparseable)"`` when replies came back and
    none parsed (a relation between decisions would compare ⊥ with ⊥ only). ``n_calls = 0`` gives
    ``"not measurable: no generation"``."""
    if n_calls == 0:
        return "not measurable: no generation"
    if n_call_errors >= n_calls:
        return every_call_failed(n_calls, n_not_sent)
    if n_parsed is not None and n_parsed == 0:
        return no_reply_parsed(n_calls - n_call_errors)
    return None


def pct_or_nan(num: float, den: float) -> float:
    """``100 · num / den`` in percent, NaN when ``den`` is 0."""
    return math.nan if den == 0 else 100.0 * num / den


#: Why a quantity over the k repeats is null when they are one computation (:mod:`metamorph.replicates`).
NOT_MEASURABLE_DETERMINISTIC = (
    "not measurable: deterministic decoding (the k repeats are one shared computation; "
    "sample, temperature > 0, to measure it)"
)


def shared_repeat_workflows(gen: pd.DataFrame) -> set[tuple[str, str]]:
    """The (workflow_id, dataset) pairs whose k ≥ 2 repeats are one computation in every (instance,
    format): each such cell has one distinct ``generation_key`` (the runner shares the generation of
    a deterministic request among its replicates, :mod:`metamorph.replicates`). Empty when ``gen``
    has no ``generation_key`` column."""
    if "generation_key" not in gen.columns or gen.empty:
        return set()
    cell = gen.groupby(INSTANCE_KEYS + ["format"], sort=False)["generation_key"].agg(["nunique", "size"])
    one = ((cell["nunique"] == 1) & (cell["size"] > 1)).groupby(level=WORKFLOW_KEYS, sort=False).all()
    return {tuple(k) for k, v in one.items() if v}


#: ``mr3_note`` of an instance one of whose calls failed: its S_f is unknown in that format.
NOT_MEASURABLE_CALL_FAILED = "not measurable: a call of the instance failed (not a reply)"


#: Why a quantity over the k repeats is null when there is one repeat per format.
NOT_MEASURABLE_ONE_REPEAT = (
    "not measurable: k = 1 (one draw per format; MR3 and voting compare the k repeats, run k >= 2 to measure them)"
)


def single_repeat_workflows(gen: pd.DataFrame) -> set[tuple[str, str]]:
    """The (workflow_id, dataset) pairs with one repeat in every (instance, format) cell (k = 1):
    there MR3 would compare each reply with itself and read as perfect stability."""
    if gen.empty:
        return set()
    cell = gen.groupby(INSTANCE_KEYS + ["format"], sort=False)["repeat"].size()
    one = (cell == 1).groupby(level=WORKFLOW_KEYS, sort=False).all()
    return {tuple(k) for k, v in one.items() if v}


def repeats_not_measurable(gen: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(workflow_id, dataset) -> why what compares the k repeats (MR3, voting) is not measurable
    there: :data:`NOT_MEASURABLE_ONE_REPEAT` (k = 1, :func:`single_repeat_workflows`) or
    :data:`NOT_MEASURABLE_DETERMINISTIC` (one shared computation, :func:`shared_repeat_workflows`);
    absent = measurable."""
    notes = {key: NOT_MEASURABLE_DETERMINISTIC for key in shared_repeat_workflows(gen)}
    notes.update({key: NOT_MEASURABLE_ONE_REPEAT for key in single_repeat_workflows(gen)})
    return notes


def mr_flags(gen: pd.DataFrame, theta: float = MR2_THETA, unit: str = "group") -> pd.DataFrame:
    """Metamorphic-relation flags per execution group (§4.1, unit of §5.2).

    **Unit** (``unit="group"``, the default). §5.2 counts "12,000 execution response groups"
    = 4 workflows × 4 datasets × 250 instances × k = 3, "each group contains four workflow
    responses to the same semantic input in four formats": a *group* is (instance, repeat r)
    and holds the r-th response of every format. MR1 and MR2 are evaluated in every group, so
    a flip in repeat 2 counts (Table 1's M1 cells of Construct, DiscrimEval and Credit Card are
    multiples of 1/750 = 1/(250·3)).

    * **MR1** (decision invariance) is violated in group (x, r) when the r-th decisions differ
      between any two formats; ⊥ is its own outcome (⊥ vs a label violates, ⊥ vs ⊥ does not).
    * **MR2** (evidence consistency) is violated in group (x, r) when, for some pair of
      formats, the Jaccard similarity of the r-th evidence-category *sets* is below ``theta``
      (θ = 0.3; ``J < θ`` violates, ``J = θ`` does not). ∅ vs ∅ has J = 1; ∅ (only unmapped
      evidence, or ⊥) vs a non-empty set has J = 0. The categories come from the reply's
      evidence items *without* the echoed ones (items that copy the prompt's instructions,
      :mod:`metamorph.studies.format_robustness.echo`; counted in ``extracted_decisions.n_echoed``):
      two replies that copy the same instruction text do not share evidence.
    * **MR3** (execution consistency) compares repeats, so it is a property of the instance:
      ``S_f`` = all k repeats of format f agree (⊥ is a value); MR3 is violated when ``S_f``
      differs between two formats. Every group of the instance carries the instance's MR3
      flag, so M3 over groups equals M3 over instances — the reading that reproduces Table 1,
      whose M3 cells of Construct, DiscrimEval and Credit Card are multiples of 1/250 (e.g.
      86.40 = 216/250, 0.40 = 1/250) and not of 1/750, and §5.4's "groups (k = 3) of repeated
      execution results".

    Not reproduced (docs/definitions.md, "Paper cells that do not reproduce"): Table 1's MedQA M1 cells (65.86,
    76.44, 17.40, 41.96) fit no denominator of 250 or 750, nor one common denominator up to 1,000,
    and MedQA M3's 71.37 and 31.85 fit none of 250, 750, 1,000; five M2 cells (19.70, 64.90,
    16.90, 53.10, 34.50) are multiples of 1/1000, not of 1/750 — M2 is kept on groups here, like
    M1, as §5.3 states ("12,000 evidence groups").

    ``unit="instance_repeat1"`` keeps the earlier reading: one row per instance (``repeat`` =
    1), MR1/MR2 on the repeat-1 responses only; MR3 as above.

    A failed call (``call_error``) is not a reply: a group holding one has null ``mr1``/``mr2`` and
    an instance holding one has null ``mr3`` (``mr3_note`` = :data:`NOT_MEASURABLE_CALL_FAILED`);
    ``n_call_errors``, ``n_parsed`` and ``n_with_evidence`` count the group's failed calls, parsed
    replies and replies with evidence, so :func:`mr_violations` can say why a rate is not measurable.

    Instances with fewer than 2 formats get null flags (no pair to compare). When the k repeats of
    a workflow × dataset are one computation (:func:`shared_repeat_workflows`: deterministic
    decoding), or there is one repeat (k = 1), MR3 compares a reply with itself: ``mr3`` is null
    and ``mr3_note`` says why (:func:`repeats_not_measurable`; never a 0 that reads as perfect
    stability).

    Raises:
        ValueError: an invalid generations frame (:func:`validate_generations`), an unknown
            ``unit``.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.MRFlags`: ``workflow_id, dataset,
        instance_id, repeat, mr1, mr2, mr3, mr3_note, n_formats, k, n_call_errors, n_parsed,
        n_with_evidence`` (one row per group; booleans).
    """
    if unit not in MR_UNITS:
        raise ValueError(f"mr_flags: unit must be one of {MR_UNITS}, got {unit!r}")
    g = validate_generations(gen)
    not_measurable = repeats_not_measurable(g)
    replies = g[~g["_err"]]
    s_f = _stable_cells(replies) if len(replies) else pd.Series(dtype=bool)
    k_f = g.groupby(INSTANCE_KEYS + ["format"], sort=False)["repeat"].size()
    failed = set(map(tuple, g.loc[g["_err"], INSTANCE_KEYS].drop_duplicates().itertuples(index=False)))
    mr3_of: dict[tuple, object] = {}
    for key, grp in g[g["repeat"] == 1].groupby(INSTANCE_KEYS, sort=False):
        fmts = grp["format"].tolist()
        if len(fmts) < 2 or key in failed:
            mr3_of[key] = pd.NA
        else:
            mr3_of[key] = len({bool(s_f.loc[key + (f,)]) for f in fmts}) > 1
    rows = []
    sub = g if unit == "group" else g[g["repeat"] == 1]
    for key, grp in sub.groupby(INSTANCE_KEYS + ["repeat"], sort=True):
        inst = key[:3]
        n_formats = len(grp)
        k = int(k_f.loc[inst + (grp["format"].iloc[0],)])
        err = grp["_err"].to_numpy(dtype=bool)
        counts = (
            int(err.sum()),
            int((~err & grp["decision"].notna().to_numpy()).sum()),
            int(sum(1 for e, c in zip(err, grp["_cats"]) if not e and c)),
            int(grp["_unsent"].sum()),
        )
        note = NOT_MEASURABLE_CALL_FAILED if inst in failed else None
        if n_formats < 2:
            rows.append((*key, pd.NA, pd.NA, pd.NA, None, n_formats, k, *counts))
            continue
        if counts[0]:
            rows.append((*key, pd.NA, pd.NA, pd.NA, note, n_formats, k, *counts))
            continue
        mr1 = grp["_dec"].nunique() > 1
        sets = [set(c) for c in grp["_cats"]]
        mr2 = any(stats.jaccard(a, b) < theta for a, b in itertools.combinations(sets, 2))
        if tuple(key[:2]) in not_measurable:
            rows.append((*key, mr1, mr2, pd.NA, not_measurable[tuple(key[:2])], n_formats, k, *counts))
        else:
            rows.append((*key, mr1, mr2, mr3_of[inst], note, n_formats, k, *counts))
    cols = ["repeat", "mr1", "mr2", "mr3", "mr3_note", "n_formats", "k", "n_call_errors", "n_parsed", "n_with_evidence"]
    out = pd.DataFrame(rows, columns=INSTANCE_KEYS + cols + ["n_not_sent"])
    for c in ("mr1", "mr2", "mr3"):
        out[c] = pd.array(out[c].tolist(), dtype="boolean")
    return MRFlags.validate(out)


def mr_violations(flags: pd.DataFrame, n_resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Violation rates M1, M2, M3 (§5.1 MRV, Table 1) with cluster-bootstrap 95% CIs.

    ``M_i`` = 100 · (violating groups) / (groups with a defined flag), per workflow × dataset
    (a group is (instance, repeat), :func:`mr_flags`; a flags frame without ``repeat`` has one
    group per instance). ``n_groups`` is that denominator and ``n_instances`` the number of
    distinct instances in it (Table 1: n_groups = 750 = 250 instances × k = 3).

    CI: percentile bootstrap that resamples **instances** (clusters: the k groups of an
    instance are resampled together, never as independent units) and recomputes the ratio
    (:func:`metamorph.stats.bootstrap_ratio_ci`, ``n_resamples``, ``seed`` — the same seed for
    every cell). All-equal flags give CI = [v, v]; a single instance gives no interval (null
    CI, ``ci_note`` says why). Instances with null flags (< 2 formats) are counted in
    ``n_undefined`` (instances), never in a rate. M3 of a workflow × dataset whose flags are all
    null by construction (``mr3_note``, deterministic decoding) is null with ``not_measurable``
    saying why.

    Raises:
        ValueError: missing columns.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.MRViolations`: ``workflow_id,
        dataset, relation, violation_pct (%), ci_low_pct, ci_high_pct, n_groups, n_instances,
        n_undefined, n_calls, n_call_errors, ci_note, not_measurable``.
    """
    f = validate_flags(flags)
    if "repeat" not in f.columns:
        f = f.assign(repeat=1)
    for c, default in (("n_call_errors", 0), ("n_parsed", None), ("n_with_evidence", None), ("n_not_sent", 0)):
        if c not in f.columns:  # a flags frame from before these counts: nothing is known of them
            f[c] = default
    rows = []
    for (wf, ds), grp in f.groupby(WORKFLOW_KEYS, sort=True):
        n_calls = int(grp["n_formats"].sum()) if "n_formats" in grp.columns else len(grp)
        n_errors = int(grp["n_call_errors"].sum())
        n_unsent = int(grp["n_not_sent"].sum())
        for rel in RELATIONS:
            col = rel.lower()
            if rel == "MR2":
                reason = not_measurable_reason(n_calls, n_errors, n_not_sent=n_unsent)
                evidence = grp["n_with_evidence"]
                if reason is None and evidence.notna().all() and int(evidence.sum()) == 0:
                    reason = f"not measurable: no reply gave evidence (0 of {n_calls - n_errors} replies)"
            else:
                parsed = grp["n_parsed"]
                reason = not_measurable_reason(
                    n_calls, n_errors, int(parsed.sum()) if parsed.notna().all() else None, n_unsent
                )
            failed_inst = set(grp.loc[grp["n_call_errors"] > 0, "instance_id"])
            if col == "mr3" and "mr3_note" in grp.columns:
                failed_inst |= set(grp.loc[grp["mr3_note"].eq(NOT_MEASURABLE_CALL_FAILED), "instance_id"])
            defined = grp[grp[col].notna()] if reason is None else grp.iloc[0:0]
            per = defined.assign(_v=defined[col].astype(bool).astype(float)).groupby("instance_id", sort=False)["_v"]
            num, den = per.sum(), per.size()
            ci = stats.bootstrap_ratio_ci(num.to_numpy(), den.to_numpy(), n_resamples=n_resamples, seed=seed)
            null = grp[grp[col].isna()]["instance_id"]
            undefined = null[~null.isin(failed_inst)].nunique()
            notes = grp["mr3_note"].dropna().unique() if col == "mr3" and "mr3_note" in grp.columns else []
            notes = [n for n in notes if n != NOT_MEASURABLE_CALL_FAILED]
            if reason is None and len(defined) == 0 and len(notes):
                reason = notes[0]
            elif reason is None and len(defined) == 0 and n_errors:
                reason = _every_group_has(n_errors, n_unsent, n_calls)
            elif reason is None and len(defined) == 0 and undefined:
                reason = (
                    f"not measurable: every instance has fewer than 2 formats ({undefined} of {undefined}); "
                    f"{rel} compares formats"
                )
            measured = reason is None
            rows.append(
                dict(
                    not_measurable=reason,
                    workflow_id=wf,
                    dataset=ds,
                    relation=rel,
                    violation_pct=100.0 * ci.mean if measured else math.nan,
                    ci_low_pct=None if ci.low is None or not measured else 100.0 * ci.low,
                    ci_high_pct=None if ci.high is None or not measured else 100.0 * ci.high,
                    n_groups=int(den.sum()),
                    n_instances=ci.n,
                    n_undefined=int(undefined),
                    n_calls=n_calls,
                    n_call_errors=n_errors,
                    ci_note=ci.note if measured else None,
                )
            )
    cols = [
        "workflow_id",
        "dataset",
        "relation",
        "violation_pct",
        "ci_low_pct",
        "ci_high_pct",
        "n_groups",
        "n_instances",
        "n_undefined",
        "n_calls",
        "n_call_errors",
        "ci_note",
        "not_measurable",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for c in ("violation_pct", "ci_low_pct", "ci_high_pct"):
        out[c] = out[c].astype(float)
    return MRViolations.validate(out)


def _every_group_has(n_errors: int, n_not_sent: int, n_calls: int) -> str:
    """Why a rate is not measurable when every group holds a call error (``n_errors`` of the
    ``n_calls`` generations, ``n_not_sent`` of them requests never sent)."""
    if n_not_sent >= n_errors:
        return f"not measurable: every group has a request that was not sent ({n_not_sent} of {n_calls} not sent)"
    if n_not_sent:
        return (
            "not measurable: every group has a call that failed or was not sent "
            f"({n_errors - n_not_sent} failed, {n_not_sent} not sent, of {n_calls})"
        )
    return f"not measurable: every group has a failed call ({n_errors} of {n_calls} calls failed)"


def accuracy_rows(g: pd.DataFrame) -> pd.DataFrame:
    """Acc_f rows of already validated generations ``g`` (:func:`accuracy_by_format` unsorted)."""
    # Set-based: sql/format_robustness/accuracy_by_format.sql is the one implementation.
    cols = _GEN_KEY + ["decision", "gold", "is_correct"]
    frame = g[cols].assign(is_correct=g["is_correct"].astype("boolean"), call_error=g["_err"].astype(bool))
    out = run_sql("format_robustness", "accuracy_by_format", gen=frame)
    unsent = g[g["gold"].notna()].groupby([*WORKFLOW_KEYS, "format"])["_unsent"].sum()
    out["not_measurable"] = [
        not_measurable_reason(int(n + e), int(e), n_not_sent=int(unsent.get((wf, ds, f), 0))) if n == 0 else None
        for wf, ds, f, n, e in zip(out["workflow_id"], out["dataset"], out["format"], out["n"], out["n_call_errors"])
    ]
    out["not_measurable"] = out["not_measurable"].astype(object)
    return out


def accuracy_by_format(gen: pd.DataFrame) -> pd.DataFrame:
    """Acc_f per workflow × dataset × format (§5.1, Table 2).

    Computed in DuckDB by ``sql/format_robustness/accuracy_by_format.sql`` (set-based).

    Over **all** generations (all repeats) that have gold; unparseable (⊥) counts as
    incorrect (a row is correct iff ``is_correct`` and the decision is parseable). A failed call
    is not a reply: it is in neither ``n`` nor the baseline's rows, and is counted in
    ``n_call_errors``; a format whose every call failed has null ``accuracy_pct`` and
    ``majority_baseline_pct`` and ``not_measurable`` saying so.
    Generations without gold are not part of accuracy; datasets without gold therefore give
    no rows. ``majority_baseline_pct`` is the accuracy of always answering the most frequent
    gold label of the same rows (the majority-label baseline: 50 on a balanced yes/no dataset).

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.AccuracyByFormat`: ``workflow_id,
        dataset, format, accuracy_pct, majority_baseline_pct, n, n_correct, n_unparseable,
        n_call_errors, not_measurable``.
    """
    g = validate_generations(gen)
    return AccuracyByFormat.validate(sort_rows(accuracy_rows(g), WORKFLOW_KEYS + ["format"]))


def stability_rows(g: pd.DataFrame) -> pd.DataFrame:
    """Stb_f rows of already validated generations ``g`` (:func:`stability_by_format` unsorted)."""
    # Set-based: sql/format_robustness/instance_stability.sql decides each instance, stability_by_format.sql averages.
    # A cell (instance, format) with a failed call is left out: its k replies are not all known.
    cell_keys = INSTANCE_KEYS + ["format"]
    err = g.groupby(cell_keys, sort=False)["_err"].agg(["any", "size", "sum"])
    err = err.assign(unsent=g.groupby(cell_keys, sort=False)["_unsent"].sum()).reset_index()
    failed = err.loc[err["any"], cell_keys]
    replies = g.merge(failed.assign(_failed=True), on=cell_keys, how="left")
    replies = replies[replies["_failed"].isna()]
    cols = [*WORKFLOW_KEYS, "format", "stability_pct", "n_instances", "k_min", "k_max"]
    out = (
        run_sql("format_robustness", "stability_by_format", cell=instance_stability(replies))
        if len(replies)
        else pd.DataFrame(columns=cols)
    )
    per = err.groupby([*WORKFLOW_KEYS, "format"], sort=False).agg(
        n_call_errors=("any", "sum"),
        k_min=("size", "min"),
        k_max=("size", "max"),
        _calls=("size", "sum"),
        _failed=("sum", "sum"),
        _unsent=("unsent", "sum"),
    )
    out = per.reset_index().merge(out.drop(columns=["k_min", "k_max"]), on=[*WORKFLOW_KEYS, "format"], how="left")
    out["n_instances"] = pd.to_numeric(out["n_instances"]).fillna(0).astype(int)
    out["n_call_errors"] = out["n_call_errors"].astype(int)
    out["stability_pct"] = out["stability_pct"].astype(float)
    out["not_measurable"] = [
        None
        if n
        else not_measurable_reason(int(calls), int(failed), n_not_sent=int(unsent))
        or f"not measurable: every instance has a failed call ({e} of {e} instances)"
        for n, e, calls, failed, unsent in zip(
            out["n_instances"], out["n_call_errors"], out["_calls"], out["_failed"], out["_unsent"]
        )
    ]
    out["not_measurable"] = out["not_measurable"].astype(object)
    return out[[*cols, "n_call_errors", "not_measurable"]]


#: Columns :func:`instance_stability` reads.
STABILITY_COLUMNS = ("workflow_id", "dataset", "instance_id", "format", "decision")


def instance_stability(gen: pd.DataFrame) -> pd.DataFrame:
    """The instance unit of Stb_f (§5.1, Table 2): whether an instance's k repeats of a format all agree.

    Computed in DuckDB by ``sql/format_robustness/instance_stability.sql`` (set-based), the one
    definition of "stable" (S_f of an instance): :func:`stability_by_format` averages it,
    :func:`mr_flags` compares it across formats (MR3), the simulated format routing reads it
    for the routed format, and the UI lists the unstable instances from it. ⊥ (decision None or
    NaN) is a value: k ⊥s agree, ⊥ next to a label disagrees; k = 1 is trivially stable.

    Args:
        gen: one row per generation with at least :data:`STABILITY_COLUMNS` (other columns are
            ignored; the frame is not validated as a whole, so a subset of generations works).

    Raises:
        ValueError: a column of :data:`STABILITY_COLUMNS` is missing.

    Returns:
        One row per ``workflow_id, dataset, instance_id, format`` present: ``stable`` (bool) and
        ``k`` (the number of its generations); row order unspecified.
    """
    require_columns(gen, STABILITY_COLUMNS, "instance_stability")
    # decisions as text or NULL (⊥), whatever the frame's dtype (an all-NaN float column included)
    decisions = [None if pd.isna(d) else str(d) for d in gen["decision"]]
    frame = gen[list(STABILITY_COLUMNS)].assign(decision=pd.Series(decisions, index=gen.index, dtype=object))
    return run_sql("format_robustness", "instance_stability", gen=frame)


def _stable_cells(g: pd.DataFrame) -> pd.Series:
    """:func:`instance_stability`'s ``stable`` indexed by workflow_id, dataset, instance_id, format."""
    return instance_stability(g).set_index(INSTANCE_KEYS + ["format"])["stable"].astype(bool)


def stability_by_format(gen: pd.DataFrame) -> pd.DataFrame:
    """Stb_f per workflow × dataset × format (§5.1, Table 2).

    Computed in DuckDB by ``sql/format_robustness/stability_by_format.sql`` (set-based).

    Stb_f = % of instances whose k repeats of format f all agree (⊥ is a value, so k ⊥s
    agree). An instance with k = 1 is trivially stable; ``k_min``/``k_max`` show k. An instance
    one of whose k calls in f failed is left out (``n_call_errors`` counts such instances; a failed
    call is not a reply); when every instance is, ``stability_pct`` is null and ``not_measurable``
    says so.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.StabilityByFormat`: ``workflow_id,
        dataset, format, stability_pct, n_instances, k_min, k_max, n_call_errors, not_measurable``.
    """
    g = validate_generations(gen)
    return StabilityByFormat.validate(sort_rows(stability_rows(g), WORKFLOW_KEYS + ["format"]))


def unit_rows(g: pd.DataFrame, unit: str, fn: str) -> pd.DataFrame:
    """The generations of ``unit``: every repeat (``"group"``) or repeat 1 only (``"instance_repeat1"``)."""
    if unit not in MR_UNITS:
        raise ValueError(f"{fn}: unit must be one of {MR_UNITS}, got {unit!r}")
    return g if unit == "group" else g[g["repeat"] == 1]


def flip_pairs(dec: pd.DataFrame, fmt: str, baseline: str) -> pd.Series:
    """Whether the decision in ``fmt`` differs from the ``baseline``'s, per paired group: ``dec`` has
    one row per (instance_id, repeat) and one column of decisions per format (⊥ as its own value);
    the groups rendered in both formats are compared. The flip of :func:`evidence_drift` (§5.3).

    Returns:
        A bool Series indexed like ``dec`` (the groups with both decisions).
    """
    both = dec[[baseline, fmt]].dropna()
    return both[fmt] != both[baseline]


def flipped_groups(gen: pd.DataFrame, fmt: str, baseline: str = BASELINE_FORMAT, unit: str = "group") -> pd.DataFrame:
    """The (instance, repeat) groups whose decision in ``fmt`` flips against ``baseline`` — the
    numerator of :func:`evidence_drift`'s ``flip_rate_pct``, in the same ``unit`` (every repeat, or
    repeat 1 only), for every workflow × dataset of ``gen``.

    Raises:
        ValueError: as :func:`evidence_drift` (a generation table that does not validate; an
            unknown ``unit``).

    Returns:
        Columns ``workflow_id, dataset, instance_id, repeat``, one row per flipped group (sorted).
    """
    paired = unit_rows(validate_generations(gen), unit, "flipped_groups")
    parts = []
    for (wf, ds), sub in paired.groupby(WORKFLOW_KEYS, sort=True):
        dec = sub.pivot(index=["instance_id", "repeat"], columns="format", values="_dec")
        if fmt not in dec or baseline not in dec:
            continue
        flips = flip_pairs(dec, fmt, baseline)
        parts.append(flips[flips].index.to_frame(index=False).assign(workflow_id=wf, dataset=ds))
    cols = [*WORKFLOW_KEYS, "instance_id", "repeat"]
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype=object if c != "repeat" else int) for c in cols})
    return pd.concat(parts, ignore_index=True)[cols].sort_values(cols, kind="stable", ignore_index=True)


def drift_rows(
    g: pd.DataFrame, baseline: str, unit: str = "group", n_resamples: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """The rows of :func:`evidence_drift` from already validated generations ``g``.

    Raises:
        ValueError: a series without the ``baseline`` format; an unknown ``unit``.
    """
    acc = accuracy_rows(g).set_index(WORKFLOW_KEYS + ["format"])["accuracy_pct"]
    paired = unit_rows(g, unit, "evidence_drift")
    rows = []
    for (wf, ds), grp in g.groupby(WORKFLOW_KEYS, sort=True):
        fmts = ordered_formats(grp["format"])
        if baseline not in fmts:
            raise ValueError(
                f"evidence_drift: workflow {wf!r}, dataset {ds!r} has no baseline format {baseline!r} (formats {fmts})"
            )
        counts = {f: stats.category_counts(grp.loc[grp["format"] == f, "_cats"]) for f in fmts}
        sub = paired[(paired["workflow_id"] == wf) & (paired["dataset"] == ds)]
        dec = sub.pivot(index=["instance_id", "repeat"], columns="format", values="_dec")
        acc_b = acc.get((wf, ds, baseline), math.nan)
        for f in fmts:
            if f == baseline:
                continue
            both = dec[[baseline, f]].dropna()
            flips = flip_pairs(dec, f, baseline).astype(float).groupby(level="instance_id", sort=False)
            num, den = flips.sum(), flips.size()
            ci = stats.bootstrap_ratio_ci(num.to_numpy(), den.to_numpy(), n_resamples=n_resamples, seed=seed)
            acc_f = acc.get((wf, ds, f), math.nan)
            rows.append(
                dict(
                    workflow_id=wf,
                    dataset=ds,
                    format=f,
                    baseline=baseline,
                    js_divergence=stats.js_divergence(counts[f], counts[baseline]),
                    delta_acc_pct=acc_f - acc_b,
                    flip_rate_pct=pct_or_nan(float(num.sum()), len(both)),
                    flip_ci_low_pct=None if ci.low is None else 100.0 * ci.low,
                    flip_ci_high_pct=None if ci.high is None else 100.0 * ci.high,
                    flip_ci_note=ci.note,
                    n_groups=len(both),
                    n_instances=int(len(den)),
                    n_category_items=int(sum(counts[f].values())),
                    n_category_items_baseline=int(sum(counts[baseline].values())),
                )
            )
    cols = [
        "workflow_id",
        "dataset",
        "format",
        "baseline",
        "js_divergence",
        "delta_acc_pct",
        "flip_rate_pct",
        "flip_ci_low_pct",
        "flip_ci_high_pct",
        "flip_ci_note",
        "n_groups",
        "n_instances",
        "n_category_items",
        "n_category_items_baseline",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for c in ("js_divergence", "delta_acc_pct", "flip_rate_pct", "flip_ci_low_pct", "flip_ci_high_pct"):
        out[c] = out[c].astype(float)
    return out


def evidence_drift(
    gen: pd.DataFrame, baseline: str = BASELINE_FORMAT, unit: str = "group", n_resamples: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Evidence drift, accuracy change and flip rate of each format against the baseline
    (§5.3, Table 2: 'JS', 'ΔAcc', 'Flip').

    Per workflow × dataset × format f ≠ baseline:

    * ``js_divergence`` — JS(f, baseline): Jensen–Shannon divergence (base 2, in [0, 1]) of
      the evidence-category *count* distributions of f and of the baseline, over all
      generations (all repeats; every list element counts, so a category cited twice counts
      twice). Both sides without any category -> 0; exactly one side empty -> 1
      (:func:`metamorph.stats.js_divergence`).
    * ``delta_acc_pct`` — ΔAcc = Acc_f − Acc_baseline in percentage points (Acc as in
      :func:`accuracy_by_format`, all repeats); null without gold.
    * ``flip_rate_pct`` — §5.3: "'Flip' counts the proportion of decision output in the given
      format that is different from the results of TXT baseline". Paired per group (instance,
      repeat r) — the unit of §5.2, as in :func:`mr_flags`: the r-th decision of f against the
      r-th decision of the baseline, over every group rendered in both (``n_groups``; ⊥ is its
      own outcome), so a flip in repeat 2 counts. ``n_instances`` = distinct instances of those
      groups. CI (``flip_ci_low_pct`` / ``flip_ci_high_pct``): the cluster bootstrap of
      :func:`mr_violations` — **instances** are resampled with their k groups
      (:func:`metamorph.stats.bootstrap_ratio_ci`, ``n_resamples``, ``seed``); ``flip_ci_note``
      says why a CI is degenerate or null.

    ``unit="instance_repeat1"`` keeps the earlier reading: the flip rate on repeat-1 decisions
    only (one group per instance); JS and ΔAcc are over all generations in both units.

    Raises:
        ValueError: a workflow × dataset has no generation in the baseline format; an unknown
            ``unit``.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.EvidenceDrift`.
    """
    g = validate_generations(gen)
    return EvidenceDrift.validate(
        sort_rows(drift_rows(g, baseline, unit, n_resamples, seed), WORKFLOW_KEYS + ["format"])
    )


def silent_violations(flags: pd.DataFrame) -> pd.DataFrame:
    """Silent violations (§5.3): MR2 violated (evidence changed) while MR1 holds (same decision).

    Computed in DuckDB by ``sql/format_robustness/silent_violations.sql`` (set-based).

    ``silent_pct`` = 100 · #(MR2 ∧ ¬MR1) / #MR2 over the groups (instance, repeat) of
    :func:`mr_flags` per workflow × dataset; null when there is no MR2 violation. Groups with
    null flags are not counted. 100 − silent_pct is §5.3's co-occurrence share (63.56% of
    MR2-violating instances also violate MR1, 36.44% are silent).

    Raises:
        ValueError: missing columns.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.SilentViolations`: ``workflow_id,
        dataset, silent_pct (%), n_silent, n_mr2, n_groups, n_instances``.
    """
    f = validate_flags(flags)
    frame = f[INSTANCE_KEYS + ["mr1", "mr2"]].astype({"mr1": "boolean", "mr2": "boolean"})
    out = run_sql("format_robustness", "silent_violations", flags=frame)
    out["silent_pct"] = out["silent_pct"].astype(float)
    return SilentViolations.validate(out)
