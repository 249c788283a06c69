"""Metrics of the document-format robustness study.

Paper: "Not as Sweet by Another Name: An Empirical Study of Format Robustness in LLM
Document Workflows" (ASE '26). A record (*instance*) is rendered in several formats (txt,
md, json, csv; TXT is the baseline) and each rendering is given to a *workflow* (provider +
model + ingestion path) ``k`` times (repeats ``r = 1..k``; repeat 1 is the primary run).

Input: the generations frame
----------------------------
One row per generation, columns :data:`GENERATION_COLUMNS`:
``workflow_id`` str, ``dataset`` str, ``instance_id`` str, ``format`` str, ``repeat`` int
(1..k), ``decision`` str or None (None = unparseable, written ⊥), ``gold`` str or None,
``is_correct`` bool (meaningless when gold is None), ``categories`` list[str] (evidence
categories of the generation; may be empty; ``None`` is read as empty), ``favorable`` bool
or None (decision == the dataset's favourable label; None when unparseable).

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
from metamorph.ordering import LevelOrder
from metamorph.schemas import require_columns
from metamorph.sql import run_sql
from metamorph.studies.format_robustness.schemas import (
    AccuracyByFormat,
    EvidenceDrift,
    FairnessDisparity,
    FormatTests,
    MRFlags,
    MRViolations,
    SilentViolations,
    StabilityByFormat,
)

__all__ = [
    "GENERATION_COLUMNS",
    "SENSITIVE_COLUMNS",
    "FORMAT_ORDER",
    "BASELINE_FORMAT",
    "MR2_THETA",
    "validate_generations",
    "mr_flags",
    "mr_violations",
    "accuracy_by_format",
    "stability_by_format",
    "evidence_drift",
    "fairness_disparity",
    "silent_violations",
    "format_tests",
]

#: Columns of the generations frame (the input contract).
GENERATION_COLUMNS = (
    "workflow_id", "dataset", "instance_id", "format", "repeat",
    "decision", "gold", "is_correct", "categories", "favorable",
)

#: Columns of the long sensitive-attribute frame.
SENSITIVE_COLUMNS = ("dataset", "instance_id", "attribute", "value")

#: Baseline-first format order, used for sorting and for routing ties.
FORMAT_ORDER = ("txt", "md", "json", "csv")

#: The baseline format (§4.1).
BASELINE_FORMAT = "txt"

#: MR2 threshold θ on the Jaccard similarity of evidence-category sets (§4.1).
MR2_THETA = 0.3

_KEYS = ["workflow_id", "dataset"]

_INST = ["workflow_id", "dataset", "instance_id"]

_GEN_KEY = ["workflow_id", "dataset", "instance_id", "format", "repeat"]

_RELATIONS = ("MR1", "MR2", "MR3")

#: Internal stand-in for ⊥ so that ⊥ compares as its own value (never a real label).
_BOTTOM = "\u22a5\x00unparseable"


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
_ordered_formats = _LEVELS.ordered
_sort = _LEVELS.sort


def validate_generations(gen: pd.DataFrame) -> pd.DataFrame:
    """Check the generations frame and return a normalised copy (the input is not modified).

    Adds two internal columns: ``_dec`` (decision with ⊥ replaced by a private sentinel, so
    ⊥ compares as its own value) and ``_cats`` (tuple of category strings; ``None``/NaN ->
    empty). ``repeat`` becomes int, ``is_correct`` bool where gold exists.

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
        cell = g.groupby(_INST + ["format"], sort=False)["repeat"].agg(["size", "min", "max"])
        bad = cell[(cell["min"] != 1) | (cell["max"] != cell["size"])]
        if len(bad):
            raise ValueError(
                f"generations: repeats must be exactly 1..k per (instance, format); "
                f"{len(bad)} cell(s) are not, e.g. {dict(zip(_INST + ['format'], bad.index[0]))}"
            )
        ks = cell["size"].groupby(level=_INST, sort=False).nunique()
        if (ks > 1).any():
            raise ValueError(
                "generations: the formats of an instance must have the same number of repeats k; "
                f"{int((ks > 1).sum())} instance(s) do not, e.g. {dict(zip(_INST, ks[ks > 1].index[0]))}"
            )
    has_gold = g["gold"].notna()
    if g.loc[has_gold, "is_correct"].isna().any():
        raise ValueError("generations: 'is_correct' is null on rows that have gold")
    parseable = g["decision"].notna()
    g["_dec"] = g["decision"].where(parseable, _BOTTOM).map(lambda d: d if d == _BOTTOM else str(d))
    g["_cats"] = [_as_categories(v, i) for i, v in enumerate(g["categories"].tolist())]
    return g


def _validate_flags(flags: pd.DataFrame) -> pd.DataFrame:
    require_columns(flags, ["workflow_id", "dataset", "instance_id", "mr1", "mr2", "mr3"], "flags")
    f = flags.copy()
    for c in ("mr1", "mr2", "mr3"):
        f[c] = pd.array(f[c].tolist(), dtype="boolean")
    return f


def _pct(num: float, den: float) -> float:
    return math.nan if den == 0 else 100.0 * num / den


def mr_flags(gen: pd.DataFrame, theta: float = MR2_THETA) -> pd.DataFrame:
    """Per-instance metamorphic-relation flags (§4.1).

    For each (workflow, dataset, instance), the decision of a format is its repeat-1
    decision (the primary run).

    * **MR1** (decision invariance) is violated when the repeat-1 decisions differ between
      any two formats; ⊥ is its own outcome (⊥ vs a label violates, ⊥ vs ⊥ does not).
    * **MR2** (evidence consistency) is violated when, for some pair of formats, the Jaccard
      similarity of the repeat-1 evidence-category *sets* is below ``theta`` (θ = 0.3;
      ``J < θ`` violates, ``J = θ`` does not). ∅ vs ∅ has J = 1 (nothing to disagree
      on); ∅ (only unmapped evidence, or ⊥) vs a non-empty set has J = 0.
    * **MR3** (execution consistency): ``S_f`` = all k repeats of format f agree (⊥ is a
      value); MR3 is violated when ``S_f`` differs between any two formats.

    Instances with fewer than 2 formats get null flags (no pair to compare).

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.MRFlags`: ``workflow_id, dataset,
        instance_id, mr1, mr2, mr3, n_formats, k``.
    """
    g = validate_generations(gen)
    s_f = g.groupby(_INST + ["format"], sort=False)["_dec"].nunique().eq(1)
    k_f = g.groupby(_INST + ["format"], sort=False)["repeat"].size()
    r1 = g[g["repeat"] == 1]
    rows = []
    for key, grp in r1.groupby(_INST, sort=True):
        n_formats = len(grp)
        fmts = grp["format"].tolist()
        k = int(k_f.loc[key + (fmts[0],)])
        if n_formats < 2:
            rows.append((*key, pd.NA, pd.NA, pd.NA, n_formats, k))
            continue
        mr1 = grp["_dec"].nunique() > 1
        sets = [set(c) for c in grp["_cats"]]
        mr2 = any(stats.jaccard(a, b) < theta for a, b in itertools.combinations(sets, 2))
        mr3 = len({bool(s_f.loc[key + (f,)]) for f in fmts}) > 1
        rows.append((*key, mr1, mr2, mr3, n_formats, k))
    out = pd.DataFrame(rows, columns=_INST + ["mr1", "mr2", "mr3", "n_formats", "k"])
    for c in ("mr1", "mr2", "mr3"):
        out[c] = pd.array(out[c].tolist(), dtype="boolean")
    return MRFlags.validate(out)


def mr_violations(flags: pd.DataFrame, n_resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Violation rates M1, M2, M3 (§5.1, Table 2) with percentile bootstrap 95% CIs.

    ``M_i`` = % of instances (with defined flags) violating MR_i, per workflow × dataset.
    The CI resamples instances (:func:`metamorph.stats.bootstrap_mean_ci`, percentile,
    ``seed`` — the same seed for every cell, so results are reproducible cell by cell).
    All-equal flags (e.g. no violation) give CI = [v, v]; a single instance gives no
    interval (null CI, ``ci_note`` says why). Instances with null flags (< 2 formats) are
    counted in ``n_undefined``.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.MRViolations`: ``workflow_id,
        dataset, relation, violation_pct, ci_low_pct, ci_high_pct, n_instances, n_undefined,
        ci_note``.
    """
    f = _validate_flags(flags)
    rows = []
    for (wf, ds), grp in f.groupby(_KEYS, sort=True):
        for rel in _RELATIONS:
            col = grp[rel.lower()]
            vals = col.dropna().astype(float).to_numpy()
            ci = stats.bootstrap_mean_ci(vals, n_resamples=n_resamples, seed=seed)
            rows.append(dict(
                workflow_id=wf, dataset=ds, relation=rel,
                violation_pct=100.0 * ci.mean,
                ci_low_pct=None if ci.low is None else 100.0 * ci.low,
                ci_high_pct=None if ci.high is None else 100.0 * ci.high,
                n_instances=ci.n, n_undefined=int(col.isna().sum()), ci_note=ci.note,
            ))
    cols = ["workflow_id", "dataset", "relation", "violation_pct", "ci_low_pct", "ci_high_pct",
            "n_instances", "n_undefined", "ci_note"]
    out = pd.DataFrame(rows, columns=cols)
    for c in ("violation_pct", "ci_low_pct", "ci_high_pct"):
        out[c] = out[c].astype(float)
    return MRViolations.validate(out)


def _accuracy(g: pd.DataFrame) -> pd.DataFrame:
    # Set-based: sql/format_robustness/accuracy_by_format.sql is the one implementation.
    cols = _GEN_KEY + ["decision", "gold", "is_correct"]
    frame = g[cols].assign(is_correct=g["is_correct"].astype("boolean"))
    return run_sql("format_robustness", "accuracy_by_format", gen=frame)


def accuracy_by_format(gen: pd.DataFrame) -> pd.DataFrame:
    """Acc_f per workflow × dataset × format (§5.1, Table 2).

    Computed in DuckDB by ``sql/format_robustness/accuracy_by_format.sql`` (set-based).

    Over **all** generations (all repeats) that have gold; unparseable (⊥) counts as
    incorrect (a row is correct iff ``is_correct`` and the decision is parseable).
    Generations without gold are not part of accuracy; datasets without gold therefore give
    no rows.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.AccuracyByFormat`: ``workflow_id,
        dataset, format, accuracy_pct, n, n_correct, n_unparseable``.
    """
    g = validate_generations(gen)
    return AccuracyByFormat.validate(_sort(_accuracy(g), _KEYS + ["format"]))


def _stability(g: pd.DataFrame) -> pd.DataFrame:
    # Set-based: sql/format_robustness/stability_by_format.sql is the one implementation.
    return run_sql("format_robustness", "stability_by_format", gen=g[_GEN_KEY + ["decision"]])


def stability_by_format(gen: pd.DataFrame) -> pd.DataFrame:
    """Stb_f per workflow × dataset × format (§5.1, Table 2).

    Computed in DuckDB by ``sql/format_robustness/stability_by_format.sql`` (set-based).

    Stb_f = % of instances whose k repeats of format f all agree (⊥ is a value, so k ⊥s
    agree). An instance with k = 1 is trivially stable; ``k_min``/``k_max`` show k.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.StabilityByFormat`: ``workflow_id,
        dataset, format, stability_pct, n_instances, k_min, k_max``.
    """
    g = validate_generations(gen)
    return StabilityByFormat.validate(_sort(_stability(g), _KEYS + ["format"]))


def _drift(g: pd.DataFrame, baseline: str) -> pd.DataFrame:
    acc = _accuracy(g).set_index(_KEYS + ["format"])["accuracy_pct"]
    r1 = g[g["repeat"] == 1]
    rows = []
    for (wf, ds), grp in g.groupby(_KEYS, sort=True):
        fmts = _ordered_formats(grp["format"])
        if baseline not in fmts:
            raise ValueError(f"evidence_drift: workflow {wf!r}, dataset {ds!r} has no baseline format {baseline!r} (formats {fmts})")
        counts = {f: stats.category_counts(grp.loc[grp["format"] == f, "_cats"]) for f in fmts}
        dec = r1[(r1["workflow_id"] == wf) & (r1["dataset"] == ds)].pivot(index="instance_id", columns="format", values="_dec")
        acc_b = acc.get((wf, ds, baseline), math.nan)
        for f in fmts:
            if f == baseline:
                continue
            both = dec[[baseline, f]].dropna()
            acc_f = acc.get((wf, ds, f), math.nan)
            rows.append(dict(
                workflow_id=wf, dataset=ds, format=f, baseline=baseline,
                js_divergence=stats.js_divergence(counts[f], counts[baseline]),
                delta_acc_pct=acc_f - acc_b,
                flip_rate_pct=_pct(int((both[f] != both[baseline]).sum()), len(both)),
                n_instances=len(both),
                n_category_items=int(sum(counts[f].values())),
                n_category_items_baseline=int(sum(counts[baseline].values())),
            ))
    cols = ["workflow_id", "dataset", "format", "baseline", "js_divergence", "delta_acc_pct", "flip_rate_pct",
            "n_instances", "n_category_items", "n_category_items_baseline"]
    out = pd.DataFrame(rows, columns=cols)
    for c in ("js_divergence", "delta_acc_pct", "flip_rate_pct"):
        out[c] = out[c].astype(float)
    return out


def evidence_drift(gen: pd.DataFrame, baseline: str = BASELINE_FORMAT) -> pd.DataFrame:
    """Evidence drift, accuracy change and flip rate of each format against the baseline (§5.1).

    Per workflow × dataset × format f ≠ baseline:

    * ``js_divergence`` — JS(f, baseline): Jensen–Shannon divergence (base 2, in [0, 1]) of
      the evidence-category *count* distributions of f and of the baseline, over all
      generations (all repeats; every list element counts, so a category cited twice counts
      twice). Both sides without any category -> 0; exactly one side empty -> 1
      (:func:`metamorph.stats.js_divergence`).
    * ``delta_acc_pct`` — ΔAcc = Acc_f − Acc_baseline in percentage points (Acc as in
      :func:`accuracy_by_format`); null without gold.
    * ``flip_rate_pct`` — % of instances (rendered in both f and the baseline) whose repeat-1
      decision differs from the baseline's (⊥ is its own outcome).

    Raises:
        ValueError: a workflow × dataset has no generation in the baseline format.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.EvidenceDrift`.
    """
    g = validate_generations(gen)
    return EvidenceDrift.validate(_sort(_drift(g, baseline), _KEYS + ["format"]))


def _validate_sensitive(sensitive: pd.DataFrame) -> pd.DataFrame:
    require_columns(sensitive, SENSITIVE_COLUMNS, "sensitive")
    s = sensitive[list(SENSITIVE_COLUMNS)].copy()
    for col in SENSITIVE_COLUMNS:
        n_null = int(s[col].isna().sum())
        if n_null:
            raise ValueError(f"sensitive: column '{col}' has {n_null} null value(s)")
        s[col] = s[col].astype(str)
    s = s.drop_duplicates()
    dup = s.duplicated(["dataset", "instance_id", "attribute"], keep=False)
    if dup.any():
        first = s.loc[dup, ["dataset", "instance_id", "attribute"]].iloc[0].to_dict()
        raise ValueError(f"sensitive: an (instance, attribute) has several values, e.g. {first}")
    return s


def fairness_disparity(gen: pd.DataFrame, sensitive: pd.DataFrame, eps: float = 1e-9) -> pd.DataFrame:
    """Format sensitivity Sen_f(g) and format disparity score FDS_f(g) (§5.1, Table 2).

    Sensitive factors g (per dataset, from the long frame ``dataset, instance_id,
    attribute, value``): every single attribute, and every pair of attributes (named
    ``"a:b"`` with a < b; its groups are the value combinations). An instance belongs to a
    group of g only if it has a value for every attribute of g.

    * Affirmative rate of a group = % favourable among the group's *parseable* repeat-1
      generations (``favorable`` not null; it is null exactly when unparseable, or when the
      dataset has no favourable label — then no group has a rate).
    * ``Sen_f(g)`` = max − min affirmative rate over the groups with ≥ 1 parseable
      generation, in percentage points; null when fewer than 2 such groups.
    * ``FDS_f(g) = (Sen_f(g) − μ_g) / (σ_g + ε)`` with μ_g, σ_g the mean and population
      standard deviation (ddof = 0) of Sen_f(g) over the formats of that workflow × dataset
      with a non-null Sen. Equal Sen in every format gives FDS = 0.

    Datasets without sensitive attributes give no rows.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.FairnessDisparity`: ``workflow_id,
        dataset, factor, format, sen_pp, fds, n_groups, min_group_n``.
    """
    g = validate_generations(gen)
    s = _validate_sensitive(sensitive)
    r1 = g[g["repeat"] == 1]
    rows = []
    for ds, s_ds in s.groupby("dataset", sort=True):
        wide = s_ds.pivot(index="instance_id", columns="attribute", values="value")
        attrs = sorted(wide.columns)
        wide.columns = [f"_attr:{a}" for a in wide.columns]  # never collide with generation columns
        factors = [(a,) for a in attrs] + list(itertools.combinations(attrs, 2))
        r1_ds = r1[r1["dataset"] == ds]
        for wf, grp_wf in r1_ds.groupby("workflow_id", sort=True):
            fmts = _ordered_formats(grp_wf["format"])
            parse = grp_wf[grp_wf["favorable"].notna()]
            parse = parse.assign(_fav=parse["favorable"].astype(bool).astype(int)).join(wide, on="instance_id")
            for factor in factors:
                fac_cols = [f"_attr:{a}" for a in factor]
                fac = parse.dropna(subset=fac_cols)
                cells = []
                for f in fmts:
                    sub = fac[fac["format"] == f]
                    grp_stats = sub.groupby(fac_cols, sort=True)["_fav"].agg(["mean", "size"])
                    n_groups = len(grp_stats)
                    sen = 100.0 * (grp_stats["mean"].max() - grp_stats["mean"].min()) if n_groups >= 2 else math.nan
                    cells.append([wf, ds, ":".join(factor), f, sen, n_groups,
                                  int(grp_stats["size"].min()) if n_groups else 0])
                sens = np.array([c[4] for c in cells], dtype=float)
                ok = ~np.isnan(sens)
                mu = float(sens[ok].mean()) if ok.any() else math.nan
                sigma = float(sens[ok].std(ddof=0)) if ok.any() else math.nan
                for c, sv in zip(cells, sens):
                    fds = math.nan if math.isnan(sv) else (sv - mu) / (sigma + eps)
                    rows.append(dict(workflow_id=c[0], dataset=c[1], factor=c[2], format=c[3],
                                     sen_pp=sv, fds=fds, n_groups=c[5], min_group_n=c[6]))
    cols = ["workflow_id", "dataset", "factor", "format", "sen_pp", "fds", "n_groups", "min_group_n"]
    out = pd.DataFrame(rows, columns=cols)
    for c in ("sen_pp", "fds"):
        out[c] = out[c].astype(float)
    return FairnessDisparity.validate(_sort(out, ["workflow_id", "dataset", "factor", "format"]))


def silent_violations(flags: pd.DataFrame) -> pd.DataFrame:
    """Silent violations (§5.1): MR2 violated (evidence changed) while MR1 holds (same decision).

    Computed in DuckDB by ``sql/format_robustness/silent_violations.sql`` (set-based).

    ``silent_pct`` = 100 · #(MR2 ∧ ¬MR1) / #MR2 per workflow × dataset; null when there is
    no MR2 violation. Instances with null flags are not counted.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.SilentViolations`: ``workflow_id,
        dataset, silent_pct, n_silent, n_mr2, n_instances``.
    """
    f = _validate_flags(flags)
    frame = f[_INST + ["mr1", "mr2"]].astype({"mr1": "boolean", "mr2": "boolean"})
    out = run_sql("format_robustness", "silent_violations", flags=frame)
    out["silent_pct"] = out["silent_pct"].astype(float)
    return SilentViolations.validate(out)


def format_tests(gen: pd.DataFrame, baseline: str = BASELINE_FORMAT) -> pd.DataFrame:
    """Significance tests of format effects per workflow × dataset (§5.1 / RQ analysis).

    On repeat-1 correctness of the generations with gold (⊥ = incorrect):

    * ``cochran_q`` — Cochran's Q across all formats over the instances rendered in every
      format (complete blocks; ``n``). Null with a note when undefined (no discordant
      instance, < 2 formats).
    * ``mcnemar`` — exact McNemar for every pair of formats (pairs in order txt, md, json,
      csv; pairwise-complete instances), Holm-corrected over the pairs of the workflow ×
      dataset (``p_holm``). ``statistic`` = min(b, c) discordant count.
    * ``spearman`` — Spearman ρ between JS and ΔAcc (:func:`evidence_drift`) over the
      non-baseline formats (the baseline's own point (0, 0) is by construction and is left
      out); < 3 points or a constant input gives null with a reason.

    Datasets without gold give no rows (nothing to test).

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.FormatTests`: ``workflow_id, dataset,
        test, comparison, statistic, p_value, p_holm, n, note``.
    """
    g = validate_generations(gen)
    gold_r1 = g[(g["repeat"] == 1) & g["gold"].notna()]
    rows = []
    for (wf, ds), grp in gold_r1.groupby(_KEYS, sort=True):
        fmts = _ordered_formats(grp["format"])
        correct = grp.assign(_c=(grp["is_correct"].astype(bool) & grp["decision"].notna()).astype(float))
        mat = correct.pivot(index="instance_id", columns="format", values="_c")[fmts]
        q = stats.cochrans_q(mat.dropna().to_numpy())
        rows.append(dict(workflow_id=wf, dataset=ds, test="cochran_q", comparison=",".join(fmts),
                         statistic=q.statistic, p_value=q.p_value, p_holm=None, n=q.n, note=q.note))
        mc = stats.mcnemar_holm(mat)
        for r in mc.itertuples(index=False):
            rows.append(dict(workflow_id=wf, dataset=ds, test="mcnemar", comparison=f"{r.a} vs {r.b}",
                             statistic=r.statistic, p_value=r.p_value, p_holm=r.p_holm, n=r.n,
                             note=None if r.n else "no instance rendered in both formats"))
        wd = g[(g["workflow_id"] == wf) & (g["dataset"] == ds)]
        if baseline in set(wd["format"]):
            drift = _drift(wd, baseline)
            sp = stats.spearman(drift["js_divergence"].tolist(), drift["delta_acc_pct"].tolist())
        else:
            sp = stats.CorrelationResult(None, None, 0, f"no baseline format {baseline!r}")
        rows.append(dict(workflow_id=wf, dataset=ds, test="spearman", comparison="js_divergence~delta_acc_pct",
                         statistic=sp.rho, p_value=sp.p_value, p_holm=None, n=sp.n, note=sp.note))
    cols = ["workflow_id", "dataset", "test", "comparison", "statistic", "p_value", "p_holm", "n", "note"]
    out = pd.DataFrame(rows, columns=cols)
    for c in ("statistic", "p_value", "p_holm"):
        out[c] = out[c].astype(float)
    return FormatTests.validate(out)
