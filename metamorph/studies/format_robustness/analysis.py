"""Analyses of the document-format study beyond the metric tables (paper §5.2–5.4, Tables 1–3):
significance tests across formats (Cochran's Q, McNemar with Holm) and across workflows, the
error distribution of correctness flips by format (Figure 3), the share of evidence changes by
format, silent violations per dataset, the pooled Spearman ρ(JS, ΔAcc), and Table 1's layout
with its Avg. rows (:func:`with_avg`, :func:`mr_table`).

Inputs are the frames of :mod:`metamorph.studies.format_robustness.metrics` (generations, MR
flags, violations, drift); outputs are validated by :mod:`metamorph.studies.format_robustness.schemas`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
import pandas as pd

from metamorph import stats
from metamorph.schemas import require_columns
from metamorph.studies.format_robustness.schemas import (
    DriftCorrelation,
    EvidenceChangeShare,
    FlipErrors,
    FormatTests,
    MRTable,
    SilentByDataset,
    WorkflowTests,
)
from metamorph.studies.format_robustness.metrics import (
    MR2_THETA,
    WORKFLOW_KEYS,
    drift_rows,
    ordered_formats,
    pct_or_nan,
    silent_violations,
    sort_rows,
    unit_rows,
    validate_flags,
    validate_generations,
)
from metamorph.studies.format_robustness.vocab import BASELINE_FORMAT, RELATIONS

__all__ = [
    "AVG",
    "drift_correlation",
    "evidence_change_share",
    "flip_error_distribution",
    "format_tests",
    "mr_table",
    "silent_violations_by_dataset",
    "with_avg",
    "workflow_tests",
]


def format_tests(gen: pd.DataFrame, baseline: str = BASELINE_FORMAT, unit: str = "group") -> pd.DataFrame:
    """Significance tests of format effects per workflow × dataset (§5.2: "Cochran's Q-tests
    across all workflow-dataset combinations ... paired McNemar's tests with Holm correction").

    On correctness of the generations with gold (⊥ = incorrect), paired per group (instance,
    repeat r) — the unit of §5.2, as in :func:`~metamorph.studies.format_robustness.metrics.mr_flags`:
    a block holds the r-th response of every format, so a flip in repeat 2 counts. The cluster is
    the instance (:data:`~metamorph.studies.format_robustness.report.RESAMPLING_UNITS`): its k
    blocks are not independent, so where an instance has more than one block the p-values come
    from tests that move an instance's blocks together — :func:`metamorph.stats.clustered_cochrans_q`
    (formats permuted within the instance) and :func:`metamorph.stats.mcnemar_holm` with
    ``cluster_level="instance_id"`` (sign flips of the instance's discordant counts). With one
    block per instance (k = 1) they are the plain Cochran's Q and exact McNemar tests.
    ``n`` counts blocks and ``n_instances`` the clusters behind them. ``unit="instance_repeat1"``
    keeps the earlier reading (repeat-1 correctness, one block per instance).

    * ``cochran_q`` — Cochran's Q across all formats over the groups rendered in every format
      (complete blocks; ``n``). Null with a note when undefined (no discordant block, < 2
      formats).
    * ``mcnemar`` — exact McNemar for every pair of formats (pairs in order txt, md, json,
      csv; pairwise-complete groups), Holm-corrected over the pairs of the workflow ×
      dataset (``p_holm``). ``statistic`` = min(b, c) discordant count.
    * ``spearman`` — Spearman ρ between JS and ΔAcc (:func:`evidence_drift`) over the
      non-baseline formats of this one setting (the baseline's own point (0, 0) is by
      construction and is left out), with the **exact** permutation p-value
      (:func:`metamorph.stats.spearman_exact`: with 3 points |ρ| = 1 has p = 1/3, never 0);
      < 3 points or a constant input gives null with a reason. §5.3's ρ pools all settings:
      :func:`drift_correlation`. ``n_instances`` is null (its points are formats).

    Datasets without gold give no rows (nothing to test).

    Raises:
        ValueError: invalid generations frame, an unknown ``unit``.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.FormatTests`: ``workflow_id, dataset,
        test, comparison, statistic, p_value, p_holm, n, n_instances, note``.
    """
    g = validate_generations(gen)
    used = unit_rows(g[~g["_err"]], unit, "format_tests")  # a failed call is no outcome: its blocks are incomplete
    rows = []
    for (wf, ds), grp in used[used["gold"].notna()].groupby(WORKFLOW_KEYS, sort=True):
        fmts = ordered_formats(grp["format"])
        correct = grp.assign(_c=(grp["is_correct"].astype(bool) & grp["decision"].notna()).astype(float))
        mat = correct.pivot(index=["instance_id", "repeat"], columns="format", values="_c")[fmts]
        complete = mat.dropna()
        inst = complete.index.get_level_values("instance_id")
        if inst.nunique() < len(complete):
            q = stats.clustered_cochrans_q(complete.to_numpy(), list(inst))
        else:
            q = stats.cochrans_q(complete.to_numpy())
        rows.append(
            dict(
                workflow_id=wf,
                dataset=ds,
                test="cochran_q",
                comparison=",".join(fmts),
                statistic=q.statistic,
                p_value=q.p_value,
                p_holm=None,
                n=q.n,
                n_instances=_n_instances(complete),
                note=q.note,
            )
        )
        mc = stats.mcnemar_holm(mat, cluster_level="instance_id")
        for r in mc.itertuples(index=False):
            rows.append(
                dict(
                    workflow_id=wf,
                    dataset=ds,
                    test="mcnemar",
                    comparison=f"{r.a} vs {r.b}",
                    statistic=r.statistic,
                    p_value=r.p_value,
                    p_holm=r.p_holm,
                    n=r.n,
                    n_instances=_n_instances(mat[[r.a, r.b]].dropna()),
                    note=None if r.n else "no instance rendered in both formats",
                )
            )
        wd = g[(g["workflow_id"] == wf) & (g["dataset"] == ds)]
        if baseline in set(wd["format"]):
            drift = drift_rows(wd, baseline)
            sp = stats.spearman_exact(drift["js_divergence"].tolist(), drift["delta_acc_pct"].tolist())
        else:
            sp = stats.CorrelationResult(None, None, 0, f"no baseline format {baseline!r}")
        rows.append(
            dict(
                workflow_id=wf,
                dataset=ds,
                test="spearman",
                comparison="js_divergence~delta_acc_pct",
                statistic=sp.rho,
                p_value=sp.p_value,
                p_holm=None,
                n=sp.n,
                n_instances=None,
                note=sp.note,
            )
        )
    cols = [
        "workflow_id",
        "dataset",
        "test",
        "comparison",
        "statistic",
        "p_value",
        "p_holm",
        "n",
        "n_instances",
        "note",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for c in ("statistic", "p_value", "p_holm"):
        out[c] = out[c].astype(float)
    out["n_instances"] = out["n_instances"].astype("Int64")
    return FormatTests.validate(out)


def _n_instances(blocks: pd.DataFrame) -> int:
    """Distinct instances of a frame indexed by (instance_id, repeat)."""
    return int(blocks.index.get_level_values("instance_id").nunique())


def silent_violations_by_dataset(flags: pd.DataFrame) -> pd.DataFrame:
    """Silent-violation rate per dataset, pooled over workflows (§5.3: "from 11.11% on MedQA to
    55.33% on DiscrimEval").

    ``silent_pct`` = 100 · Σ_workflows #(MR2 ∧ ¬MR1) / Σ_workflows #MR2 over the groups of
    :func:`mr_flags` (pooled counts, so that silent and co-occurring shares add up to 100 as
    in §5.3's 63.56% / 36.44%); null when the dataset has no MR2 violation. A final row with
    ``dataset = "*"`` pools every dataset.

    Raises:
        ValueError: missing columns.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.SilentByDataset`: ``dataset,
        silent_pct (%), cooccur_pct (%), n_silent, n_mr2, n_groups, n_workflows``.
    """
    per = silent_violations(flags)
    rows = []
    for ds, grp in list(per.groupby("dataset", sort=True)) + [("*", per)]:
        n_mr2, n_silent = int(grp["n_mr2"].sum()), int(grp["n_silent"].sum())
        silent = pct_or_nan(n_silent, n_mr2)
        rows.append(
            dict(
                dataset=ds,
                silent_pct=silent,
                cooccur_pct=100.0 - silent if n_mr2 else math.nan,
                n_silent=n_silent,
                n_mr2=n_mr2,
                n_groups=int(grp["n_groups"].sum()),
                n_workflows=int(grp["workflow_id"].nunique()),
            )
        )
    out = pd.DataFrame(
        rows, columns=["dataset", "silent_pct", "cooccur_pct", "n_silent", "n_mr2", "n_groups", "n_workflows"]
    )
    for c in ("silent_pct", "cooccur_pct"):
        out[c] = out[c].astype(float)
    return SilentByDataset.validate(out)


def workflow_tests(flags: pd.DataFrame) -> pd.DataFrame:
    """Cochran's Q across workflows per dataset and relation (§5.3 on M2, §5.4 on M3: "Cochran's
    Q-tests on aligned instances ... all Q > 338, p < 0.001").

    Blocks are the units aligned across every workflow of the dataset: groups (instance,
    repeat) for MR1 and MR2 (their unit), instances for MR3 (an instance-level flag repeated
    on its groups would count each instance k times). Units missing in a workflow, or with a
    null flag in one, are left out (``n`` counts the blocks used). Treatments = workflows.
    Null statistic with a note when undefined (fewer than 2 workflows, no block, no
    discordant block) — :func:`metamorph.stats.cochrans_q`.

    Raises:
        ValueError: missing columns.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.WorkflowTests`: ``dataset,
        relation, unit, workflows, statistic (Q), p_value, n, note``.
    """
    f = validate_flags(flags)
    if "repeat" not in f.columns:
        f = f.assign(repeat=1)
    rows = []
    for ds, grp in f.groupby("dataset", sort=True):
        wfs = sorted(grp["workflow_id"].unique())
        for rel in RELATIONS:
            col = rel.lower()
            unit = ["instance_id"] if rel == "MR3" else ["instance_id", "repeat"]
            sub = grp.drop_duplicates(["workflow_id"] + unit) if rel == "MR3" else grp
            vals = sub.assign(_v=[math.nan if pd.isna(v) else float(bool(v)) for v in sub[col]])
            mat = vals.pivot(index=unit, columns="workflow_id", values="_v").reindex(columns=wfs).dropna()
            q = stats.cochrans_q(mat.to_numpy())
            rows.append(
                dict(
                    dataset=ds,
                    relation=rel,
                    unit="instance" if rel == "MR3" else "group",
                    workflows=",".join(wfs),
                    statistic=q.statistic,
                    p_value=q.p_value,
                    n=int(len(mat)),
                    note=q.note,
                )
            )
    out = pd.DataFrame(rows, columns=["dataset", "relation", "unit", "workflows", "statistic", "p_value", "n", "note"])
    for c in ("statistic", "p_value"):
        out[c] = out[c].astype(float)
    return WorkflowTests.validate(out)


def flip_error_distribution(gen: pd.DataFrame) -> pd.DataFrame:
    """Where the errors of correctness flips fall, by format (§5.2, Figure 3).

    A *flip group* is a group (instance with gold, repeat r) whose r-th responses are correct
    in some format and incorrect in another (⊥ is incorrect). Per workflow × dataset × format:
    ``n_errors`` = flip groups in which this format is incorrect and ``error_pct`` = 100 ·
    n_errors / n_flip_groups ("among the 3,302 instances, the CSV format input yields the
    highest error rate, reaching up to 91.92%"). The denominator is the same for every format
    of a workflow × dataset (all its flip groups). Datasets without gold give no rows.

    Raises:
        ValueError: invalid generations frame.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.FlipErrors`: ``workflow_id,
        dataset, format, n_errors, n_flip_groups, error_pct (%)``.
    """
    g = validate_generations(gen)
    gg = g[g["gold"].notna() & ~g["_err"]]  # a failed call is neither correct nor incorrect
    gg = gg.assign(_ok=gg["is_correct"].astype(bool) & gg["decision"].notna())
    rows = []
    for (wf, ds), grp in gg.groupby(WORKFLOW_KEYS, sort=True):
        fmts = ordered_formats(grp["format"])
        mat = grp.pivot_table(index=["instance_id", "repeat"], columns="format", values="_ok", aggfunc="first")
        ok_any = mat.eq(True).any(axis=1)
        bad_any = mat.eq(False).any(axis=1)
        flips = mat[ok_any & bad_any]
        n_flip = len(flips)
        for f in fmts:
            n_err = int(flips[f].eq(False).sum()) if f in flips.columns else 0
            rows.append(
                dict(
                    workflow_id=wf,
                    dataset=ds,
                    format=f,
                    n_errors=n_err,
                    n_flip_groups=n_flip,
                    error_pct=pct_or_nan(n_err, n_flip),
                )
            )
    out = pd.DataFrame(rows, columns=["workflow_id", "dataset", "format", "n_errors", "n_flip_groups", "error_pct"])
    out["error_pct"] = out["error_pct"].astype(float)
    return FlipErrors.validate(sort_rows(out, WORKFLOW_KEYS + ["format"]))


def evidence_change_share(gen: pd.DataFrame, baseline: str = BASELINE_FORMAT, theta: float = MR2_THETA) -> pd.DataFrame:
    """Share of evidence changes by format against the baseline (§5.3: "52.21% and 24.35% of
    evidence changes occur under the CSV and JSON formats").

    An *evidence change* of format f ≠ baseline is a group (instance, repeat r) whose r-th
    evidence-category sets of f and of the baseline have Jaccard < ``theta`` (the MR2 test
    of that pair). ``share_pct`` = 100 · n_changes_f / Σ_f' n_changes_f' — the formats'
    shares of all changes sum to 100. Rows per workflow × dataset, then per dataset pooled
    over workflows (``workflow_id = "*"``) and pooled over everything (``"*"``, ``"*"``).

    Raises:
        ValueError: invalid generations frame; a workflow × dataset without the baseline.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.EvidenceChangeShare`:
        ``workflow_id, dataset, format, baseline, n_changes, n_groups, share_pct (%)``.
    """
    g = validate_generations(gen)
    counts: list[dict] = []
    for (wf, ds), grp in g.groupby(WORKFLOW_KEYS, sort=True):
        fmts = ordered_formats(grp["format"])
        if baseline not in fmts:
            raise ValueError(
                f"evidence_change_share: workflow {wf!r}, dataset {ds!r} has no baseline format "
                f"{baseline!r} (formats {fmts})"
            )
        cats = grp[~grp["_err"]].set_index(["instance_id", "repeat", "format"])["_cats"]  # replies only
        fmt_of = cats.index.get_level_values("format")
        base = cats[fmt_of == baseline].droplevel("format")
        for f in fmts:
            if f == baseline:
                continue
            other = cats[fmt_of == f].droplevel("format")
            both = base.index.intersection(other.index)
            n = sum(stats.jaccard(set(base[i]), set(other[i])) < theta for i in both)
            counts.append(
                dict(workflow_id=wf, dataset=ds, format=f, baseline=baseline, n_changes=int(n), n_groups=len(both))
            )
    c = pd.DataFrame(counts, columns=["workflow_id", "dataset", "format", "baseline", "n_changes", "n_groups"])
    pooled_ds = c.groupby(["dataset", "format", "baseline"], sort=False)[["n_changes", "n_groups"]].sum().reset_index()
    pooled_ds["workflow_id"] = "*"
    pooled_all = c.groupby(["format", "baseline"], sort=False)[["n_changes", "n_groups"]].sum().reset_index()
    pooled_all["workflow_id"], pooled_all["dataset"] = "*", "*"
    out = pd.concat([c, pooled_ds, pooled_all], ignore_index=True)[list(c.columns)]
    tot = out.groupby(["workflow_id", "dataset"], sort=False)["n_changes"].transform("sum")
    out["share_pct"] = [(pct_or_nan(n, t)) for n, t in zip(out["n_changes"], tot)]
    out["share_pct"] = out["share_pct"].astype(float)
    return EvidenceChangeShare.validate(sort_rows(out, WORKFLOW_KEYS + ["format"]))


def drift_correlation(drift: pd.DataFrame) -> pd.DataFrame:
    """Spearman ρ(JS, ΔAcc) pooled over settings (§5.3: "ρ(JS, ΔAcc) = −0.470, p < 0.05 across all
    settings ... up to ρ = −0.683 on MedQA").

    Input: :func:`evidence_drift` rows (one per workflow × dataset × format ≠ baseline). Rows
    with a null ΔAcc (datasets without gold) are left out and counted in ``n_left_out``.
    ``scope = "all"`` pools every (workflow, dataset, format) point; ``scope =
    "dataset:<name>"`` pools the workflows × formats of one dataset. p-value:
    :func:`metamorph.stats.spearman_exact` (exact permutation p for n ≤ 9, t approximation
    beyond). Fed Table 2's own 24 rounded points this gives ρ = −0.385 (p = 0.063), not the
    paper's −0.470: the paper's value cannot be recomputed from its rounded table.

    Raises:
        ValueError: missing columns.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.DriftCorrelation`: ``scope, rho,
        p_value, n, n_left_out, note``.
    """
    require_columns(drift, ["workflow_id", "dataset", "format", "js_divergence", "delta_acc_pct"], "drift")
    rows = []
    scopes = [("all", drift)] + [(f"dataset:{ds}", grp) for ds, grp in drift.groupby("dataset", sort=True)]
    for scope, grp in scopes:
        ok = grp[grp["delta_acc_pct"].notna() & grp["js_divergence"].notna()]
        sp = stats.spearman_exact(ok["js_divergence"].tolist(), ok["delta_acc_pct"].tolist())
        rows.append(
            dict(scope=scope, rho=sp.rho, p_value=sp.p_value, n=sp.n, n_left_out=len(grp) - len(ok), note=sp.note)
        )
    out = pd.DataFrame(rows, columns=["scope", "rho", "p_value", "n", "n_left_out", "note"])
    for c in ("rho", "p_value"):
        out[c] = out[c].astype(float)
    return DriftCorrelation.validate(out)


#: Label of the average row / column of the paper's tables.
AVG = "Avg."


def with_avg(cells: pd.DataFrame, row: str, col: str, value: str, by: Sequence[str] = ()) -> pd.DataFrame:
    """Add the paper's ``Avg.`` row and column to a long table of cells (Tables 1–3).

    For every combination of ``by`` (e.g. the relation M1/M2/M3): the ``Avg.`` column of a
    row is the **unweighted mean of that row's cells** over ``col``; the ``Avg.`` row of a
    column is the unweighted mean over ``row``; the corner is the mean of all cells (equal to
    the mean of either margin when the table is complete). Means skip null cells. This is how
    Table 1's margins are built: e.g. MedQA M1 Avg. = (65.86 + 76.44 + 17.40 + 41.96)/4 =
    50.415 -> 50.42; OpenAI M1 Avg. = (65.86 + 29.47 + 17.07 + 52.93)/4 = 41.33.

    Raises:
        ValueError: missing columns, a cell given twice, or ``Avg.`` already used as a key.

    Returns:
        ``cells`` (columns ``*by, row, col, value``) followed by the Avg. cells.
    """
    keys = [*by, row, col]
    require_columns(cells, [*keys, value], "cells")
    c = cells[[*keys, value]].copy()
    if c.duplicated(keys).any():
        raise ValueError(f"with_avg: a cell is given twice, e.g. {c.loc[c.duplicated(keys), keys].iloc[0].to_dict()}")
    if (c[row] == AVG).any() or (c[col] == AVG).any():
        raise ValueError(f"with_avg: {AVG!r} is already a {row} or {col}")
    c[value] = c[value].astype(float)
    grp_by = list(by)
    parts = [c]
    row_avg = c.groupby([*grp_by, row], sort=False)[value].mean().reset_index().assign(**{col: AVG})
    col_avg = c.groupby([*grp_by, col], sort=False)[value].mean().reset_index().assign(**{row: AVG})
    corner = (
        c.groupby(grp_by, sort=False)[value].mean().reset_index()
        if grp_by
        else pd.DataFrame({value: [c[value].mean()]})
    ).assign(**{row: AVG, col: AVG})
    parts += [row_avg, col_avg, corner]
    return pd.concat(parts, ignore_index=True)[[*keys, value]]


def mr_table(violations: pd.DataFrame) -> pd.DataFrame:
    """Table 1: M1/M2/M3 (%) per dataset × workflow with the ``Avg.`` row and column
    (:func:`with_avg`, unweighted means of cells), from :func:`mr_violations`.

    Raises:
        ValueError: missing columns.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.MRTable`: ``relation, dataset,
        workflow_id, violation_pct (%)`` (dataset / workflow_id ``Avg.`` for the margins).
    """
    require_columns(violations, ["workflow_id", "dataset", "relation", "violation_pct"], "violations")
    out = with_avg(violations, "dataset", "workflow_id", "violation_pct", by=["relation"])
    return MRTable.validate(out[["relation", "dataset", "workflow_id", "violation_pct"]])
