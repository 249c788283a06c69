"""Upgrade verdicts: a candidate model against the approved baseline, per metric and slice.

Every study reduces its outputs to **item scores** (:func:`item_scores`): one value per
(model, metric, slice, item) — e.g. the correctness of an instance in one format, averaged over
its k repeats, or an instance's MR1 violation flag averaged over its groups. A comparison pairs
the two models' values item by item (only items both models have; the others are counted, not
dropped silently) and reports, per (metric, slice):

* the difference ``candidate − baseline`` of the item means with a **paired percentile
  bootstrap 95% CI** over items (:func:`metamorph.stats.paired_bootstrap_diff_ci`);
* a two-sided test of "no difference": the **exact McNemar test** when every paired value is
  0/1 (per-item correctness or a per-item flag: McNemar 1947, Psychometrika 12:153–157; exact
  binomial form as recommended by Fagerland, Lydersen & Laake 2013, BMC Med. Res. Methodol.
  13:91; the test the format paper uses for format pairs, §5.2), otherwise the paired
  sign-flip **permutation test** of the mean difference
  (:func:`metamorph.stats.paired_permutation_test`, which equals exact McNemar on 0/1 data);
* **Holm**'s step-down adjustment over the family of all (metric, slice) comparisons of one
  candidate in one call (Holm 1979, Scand. J. Statist. 6:65–70; :func:`metamorph.stats.holm`):
  a candidate's verdicts do not depend on how many other candidates are registered;
* a **verdict** at level α on the Holm-adjusted p-value: ``regressed`` / ``improved`` (by the
  sign of the difference and whether higher is better for the metric) or ``no detectable
  change``; ``not comparable`` when the two models share no item in the slice;
* the **minimum detectable effect** of the row's test at Holm's guaranteed level α/m (m = the
  family's size) and a stated power (:func:`metamorph.power.detectable`): how large a change
  this run could have found, or why no verdict was possible at all (too few items).

The unit of resampling and testing is the item, so repeats/seeds of an item are never treated as
independent (Miller 2024, "Adding Error Bars to Evals", arXiv 2411.00640, §2.2 clustered
questions). Pure library: no Dagster.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from metamorph.export import PCT_DECIMALS
from metamorph.power import DEFAULT_POWER, detectable
from metamorph.schemas import VERDICTS, require_columns
from metamorph.stats import holm, mcnemar_exact, paired_bootstrap_diff_ci, paired_permutation_test

__all__ = [
    "ALL",
    "COMPARISON_COLUMNS",
    "ITEM_SCORE_COLUMNS",
    "P_DIGITS",
    "VERDICTS",
    "compare_models",
    "comparison_markdown",
    "item_scores",
    "slice_label",
    "verdict",
    "verdict_summary",
]

ITEM_SCORE_COLUMNS = ["model_id", "metric", "slice", "item_id", "value", "n_obs"]


COMPARISON_COLUMNS = [
    "candidate_id",
    "baseline_id",
    "metric",
    "slice",
    "higher_is_better",
    "n_items",
    "n_baseline_only",
    "n_candidate_only",
    "baseline_mean",
    "candidate_mean",
    "difference",
    "ci_low",
    "ci_high",
    "ci_note",
    "n_better",
    "n_worse",
    "test",
    "statistic",
    "p_value",
    "p_holm",
    "alpha",
    "verdict",
    "mde",
    "mde_note",
]

#: The slice label of an unsliced metric (slices read ``dataset=medqa, format=json``).
ALL = "all"

#: Significant digits of a p-value in the comparison tables (``0.0234``).
P_DIGITS = 3


def slice_label(levels: Mapping[str, object]) -> str:
    """``{"dataset": "medqa", "format": "json"}`` -> ``"dataset=medqa, format=json"``; ``{}`` -> ``"all"``."""
    return ", ".join(f"{k}={v}" for k, v in levels.items()) if levels else ALL


def item_scores(
    frame: pd.DataFrame,
    *,
    metric: str,
    value: str,
    item: Sequence[str],
    slices: Sequence[str] = (),
    model: str = "model_id",
) -> pd.DataFrame:
    """Per-item values of one metric: the mean of ``value`` over the rows of each
    (model, slice, item) — repeats, seeds or groups of an item collapse into one value.

    Args:
        frame: one row per observation (e.g. a generation), with ``model``, ``item``,
            ``slices`` and ``value`` columns. ``value`` is numeric or boolean (True = 1).
        metric: the metric name written in every row.
        value: the column holding the observation's value.
        item: the columns identifying an item (joined with ``/`` into ``item_id``); they may
            include slice columns (items of a task are ``task/item_id``, sliced by task).
        slices: the columns defining a slice (``[]`` = one slice, ``all``).
        model: the model id column.

    Returns:
        :data:`ITEM_SCORE_COLUMNS`: ``model_id, metric, slice, item_id, value`` (mean, float),
        ``n_obs`` (rows averaged).

    Raises:
        ValueError: a missing column, or a missing ``value`` (the caller decides which rows
            count — e.g. only instances with a gold label — and filters them explicitly).
    """
    require_columns(frame, [model, value, *item, *slices], f"item_scores({metric})")
    if frame[value].isna().any():
        raise ValueError(
            f"item_scores({metric}): {int(frame[value].isna().sum())} row(s) with a missing "
            f"{value!r}; filter the rows that do not count before scoring"
        )
    if frame.empty:
        return pd.DataFrame(columns=ITEM_SCORE_COLUMNS)
    keys = list(dict.fromkeys([model, *slices, *item]))  # a column may be both slice and item (task)
    df = frame[keys].copy()
    df["_v"] = frame[value].astype(float)
    g = df.groupby(keys, sort=True, dropna=False)["_v"].agg(["mean", "size"]).reset_index()
    out = pd.DataFrame(
        {
            "model_id": g[model].astype(str),
            "metric": metric,
            "slice": [slice_label({s: r[s] for s in slices}) for _, r in g.iterrows()],
            "item_id": g[list(item)].astype(str).agg("/".join, axis=1),
            "value": g["mean"].astype(float),
            "n_obs": g["size"].astype(int),
        }
    )
    return out[ITEM_SCORE_COLUMNS]


def _binary(*arrays: np.ndarray) -> bool:
    return all(np.isin(a, (0.0, 1.0)).all() for a in arrays)


def _compare_cell(base: pd.Series, cand: pd.Series, higher: bool, n_resamples: int, seed: int) -> dict:
    """One (metric, slice) comparison on items indexed by item_id (before Holm)."""
    common = base.index.intersection(cand.index).sort_values()
    row = {
        "n_items": int(len(common)),
        "n_baseline_only": int(len(base.index.difference(cand.index))),
        "n_candidate_only": int(len(cand.index.difference(base.index))),
    }
    if len(common) == 0:
        return {
            **row,
            "baseline_mean": math.nan,
            "candidate_mean": math.nan,
            "difference": math.nan,
            "ci_low": math.nan,
            "ci_high": math.nan,
            "ci_note": "no item scored for both models",
            "n_better": 0,
            "n_worse": 0,
            "test": None,
            "statistic": math.nan,
            "p_value": math.nan,
            "_pairs": None,
        }
    b = base.loc[common].to_numpy(dtype=float)
    c = cand.loc[common].to_numpy(dtype=float)
    ci = paired_bootstrap_diff_ci(b, c, n_resamples=n_resamples, seed=seed)
    d = c - b
    better = int((d > 0).sum() if higher else (d < 0).sum())
    worse = int((d < 0).sum() if higher else (d > 0).sum())
    if _binary(b, c):
        stat, p, _, _, _ = mcnemar_exact(b.astype(bool), c.astype(bool))
        test = "mcnemar_exact"
    else:
        _, p, _ = paired_permutation_test(b, c, seed=seed)
        stat, test = float(d.mean()), "paired_permutation"
    return {
        **row,
        "baseline_mean": float(b.mean()),
        "candidate_mean": float(c.mean()),
        "difference": ci.mean,
        "ci_low": math.nan if ci.low is None else ci.low,
        "ci_high": math.nan if ci.high is None else ci.high,
        "ci_note": ci.note,
        "n_better": better,
        "n_worse": worse,
        "test": test,
        "statistic": stat,
        "p_value": p,
        "_pairs": (b, c),
    }


def verdict(difference: float, p_holm: float, higher_is_better: bool, alpha: float) -> str:
    """``regressed`` / ``improved`` when ``p_holm < alpha`` (direction from the sign of
    ``difference`` and ``higher_is_better``), ``no detectable change`` otherwise, ``not
    comparable`` when there is no p-value (no shared item)."""
    if p_holm is None or math.isnan(p_holm):
        return "not comparable"
    if p_holm >= alpha or difference == 0:
        return "no detectable change"
    return "improved" if (difference > 0) == higher_is_better else "regressed"


def compare_models(
    scores: pd.DataFrame,
    baseline: str,
    higher_is_better: Mapping[str, bool],
    *,
    candidates: Sequence[str] | None = None,
    alpha: float = 0.05,
    n_resamples: int = 2000,
    seed: int = 0,
    power: float = DEFAULT_POWER,
) -> pd.DataFrame:
    """Every candidate against ``baseline`` on every (metric, slice) of ``scores``.

    Args:
        scores: item scores (:data:`ITEM_SCORE_COLUMNS`, e.g. several :func:`item_scores`
            frames concatenated); at most one row per (model, metric, slice, item).
        baseline: the approved model id.
        higher_is_better: per metric, whether a larger value is better (accuracy: True;
            violation rates: False). Every metric of ``scores`` needs an entry.
        candidates: model ids to compare (default: every model in ``scores`` but the baseline).
        alpha: family-wise level of the verdicts (Holm).
        n_resamples: bootstrap (and Monte Carlo permutation) resamples.
        seed: seed of the bootstrap (and Monte Carlo permutation) draws.
        power: the power of the ``mde`` column (0 < power < 1).

    Returns:
        :data:`COMPARISON_COLUMNS`, one row per candidate × (metric, slice) present for either
        model, sorted by candidate, metric, slice. Values are in the metric's unit (fractions
        for rates); ``difference``, ``ci_low``, ``ci_high`` are candidate − baseline.
        ``statistic`` is McNemar's min(n01, n10) or the mean difference; ``p_holm`` is
        adjusted within the candidate's family. A model with no row in ``scores`` gets
        ``not comparable`` rows (the baseline missing makes every row not comparable).
        ``mde``: the smallest difference (either sign, metric's unit) the row's test detects with
        probability ``power`` at α/m, m the candidate's family size (:func:`metamorph.power.detectable`:
        exact McNemar power with the observed discordance, or the sign-flip test's normal
        approximation with the observed spread of the differences); NaN when there is none, and
        ``mde_note`` says how it was computed or why there is none (e.g. ``no α = 0.05 verdict is
        possible with 4 items``).

    Raises:
        ValueError: missing columns, duplicate items, a metric without a direction, ``alpha`` or
            ``power`` not in (0, 1).
    """
    require_columns(scores, ITEM_SCORE_COLUMNS, "compare_models")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"compare_models: alpha must be in (0, 1), got {alpha}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"compare_models: power must be in (0, 1), got {power}")
    dup = scores.duplicated(["model_id", "metric", "slice", "item_id"])
    if dup.any():
        r = scores[dup].iloc[0]
        raise ValueError(
            f"compare_models: {int(dup.sum())} duplicate item score(s), e.g. model {r.model_id!r} "
            f"metric {r.metric!r} slice {r.slice!r} item {r.item_id!r}"
        )
    unknown = sorted(set(scores["metric"]) - set(higher_is_better))
    if unknown:
        raise ValueError(f"compare_models: no direction (higher_is_better) for metric(s) {unknown}")
    if candidates is None:
        candidates = sorted(set(scores["model_id"]) - {baseline})
    cells = scores[["metric", "slice"]].drop_duplicates().sort_values(["metric", "slice"]).itertuples(index=False)
    cells = list(cells)
    by_key = {k: g.set_index("item_id")["value"] for k, g in scores.groupby(["model_id", "metric", "slice"])}
    empty = pd.Series(dtype=float, index=pd.Index([], name="item_id"))
    rows = []
    for cand in candidates:
        family = []
        for metric, sl in cells:
            base_s = by_key.get((baseline, metric, sl), empty)
            cand_s = by_key.get((cand, metric, sl), empty)
            if base_s.empty and cand_s.empty:
                continue
            higher = bool(higher_is_better[metric])
            family.append(
                {
                    "candidate_id": cand,
                    "baseline_id": baseline,
                    "metric": metric,
                    "slice": sl,
                    "higher_is_better": higher,
                    **_compare_cell(base_s, cand_s, higher, n_resamples, seed),
                }
            )
        adjusted = holm([r["p_value"] for r in family])
        m = sum(1 for r in family if r["_pairs"] is not None)
        for r, ph in zip(family, adjusted):
            r["p_holm"] = ph
            r["alpha"] = alpha
            r["verdict"] = verdict(r["difference"], ph, r["higher_is_better"], alpha)
            pairs = r.pop("_pairs")
            if pairs is None:
                r["mde"], r["mde_note"] = math.nan, "no item scored for both models"
            else:
                det = detectable(*pairs, r["test"], alpha, m, power)
                r["mde"], r["mde_note"] = det.mde, det.note
        rows.extend(family)
    out = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    for c in ("n_items", "n_baseline_only", "n_candidate_only", "n_better", "n_worse"):
        out[c] = out[c].astype(int)
    return out.reset_index(drop=True)


def verdict_summary(comparison: pd.DataFrame) -> pd.DataFrame:
    """Counts of verdicts per candidate: ``candidate_id`` + one column per :data:`VERDICTS`."""
    if comparison.empty:
        return pd.DataFrame(columns=["candidate_id", *VERDICTS])
    t = comparison.pivot_table(index="candidate_id", columns="verdict", values="metric", aggfunc="count", fill_value=0)
    return t.reindex(columns=list(VERDICTS), fill_value=0).reset_index()


def comparison_markdown(comparison: pd.DataFrame, scale: float = 100.0, unit: str = "pp") -> str:
    """The comparison as a markdown table (regressions first, then improvements), with the
    difference, its CI and the MDE multiplied by ``scale`` (default: fractions shown as percentage
    points). A ``no detectable change`` verdict says what the run could have detected (``mde``) or
    why no verdict was possible (``mde_note``)."""
    if comparison.empty:
        return "_no comparison: no candidate or no approved baseline_"
    order = {v: i for i, v in enumerate(VERDICTS)}
    df = comparison.assign(_o=comparison["verdict"].map(order)).sort_values(["_o", "p_holm", "metric", "slice"])

    def fmt(v: float) -> str:
        return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{scale * v:+.{PCT_DECIMALS}f}"

    def said(r) -> str:
        text = f"**{r.verdict}**"
        if r.verdict != "no detectable change":
            return text
        mde, note = getattr(r, "mde", math.nan), getattr(r, "mde_note", None)
        if mde is not None and not math.isnan(mde):
            return f"{text} (this run could detect a regression of ≥ {scale * mde:.1f} {unit})"
        return f"{text} ({note})" if note else text

    lines = [
        f"| candidate | metric | slice | n | Δ ({unit}) | 95% CI | test | p (Holm) | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in df.itertuples():
        ci = f"[{fmt(r.ci_low)}, {fmt(r.ci_high)}]" if not math.isnan(r.ci_low) else "–"
        p = "–" if math.isnan(r.p_holm) else f"{r.p_holm:.{P_DIGITS}g}"
        lines.append(
            f"| {r.candidate_id} | {r.metric} | {r.slice} | {r.n_items} | {fmt(r.difference)} | {ci} | "
            f"{r.test or '–'} | {p} | {said(r)} |"
        )
    return "\n".join(lines)
