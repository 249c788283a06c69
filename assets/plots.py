"""matplotlib figures shown in the Dagster UI (PNG files linked from short markdown metadata: assets._common.figure_md)."""

from __future__ import annotations

import dagster as dg
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from collections.abc import Sequence  # noqa: E402

from assets._common import figure_md  # noqa: E402


def _formats(df: pd.DataFrame, order: Sequence[str]) -> list[str]:
    present = list(dict.fromkeys(df["format"]))
    return [f for f in order if f in present] + sorted(f for f in present if f not in order)


def bars_by_format(df: pd.DataFrame, value: str, title: str, order: Sequence[str]) -> dg.MetadataValue:
    """Grouped bars: one group per format (in ``order``, the study's vocabulary; others after, sorted),
    one bar per workflow × dataset, ``value`` on y (0–100 %)."""
    if df.empty:
        return dg.MetadataValue.md("_no rows to plot_")
    fmts = _formats(df, order)
    series = sorted({(r.workflow_id, r.dataset) for r in df.itertuples()})
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(fmts), 3.4))
    width = 0.8 / len(series)
    for i, (wf, ds) in enumerate(series):
        part = df[(df.workflow_id == wf) & (df.dataset == ds)].set_index("format")[value]
        ax.bar(np.arange(len(fmts)) + i * width, [part.get(f, np.nan) for f in fmts], width, label=f"{wf} · {ds}")
    return _grouped_bars_md(fig, ax, fmts, width, "%", title)


def _grouped_bars_md(fig, ax, levels: list, width: float, ylabel: str, title: str, **tick_style) -> dg.MetadataValue:
    """Finish a grouped bar chart on a 0–100 scale (ticks under each group, the legend below the
    axes: beside them it would make the figure too wide to show inline)."""
    ax.set_xticks(np.arange(len(levels)) + 0.4 - width / 2, levels, **tick_style)
    ax.set_ylim(0, 100)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.14 if not tick_style else -0.3))
    return figure_md(fig)


def fds_heatmap(df: pd.DataFrame, order: Sequence[str]) -> dg.MetadataValue:
    """FDS_f(g) heatmap: rows = workflow · dataset · factor, columns = formats (in ``order``)."""
    d = df.dropna(subset=["fds"]) if not df.empty else df
    if d.empty:
        return dg.MetadataValue.md("_no sensitive factors with ≥ 2 groups: nothing to plot_")
    # two-line row labels and the colour bar below: the figure is shown about 360 px wide
    d = d.assign(row=d.factor + "\n" + d.workflow_id + " · " + d.dataset)
    mat = d.pivot_table(index="row", columns="format", values="fds")[_formats(d, order)]
    fig, ax = plt.subplots(figsize=(2.5 + 0.6 * mat.shape[1], 1.6 + 0.45 * mat.shape[0]))
    lim = max(1.0, float(np.nanmax(np.abs(mat.values))))
    im = ax.imshow(mat.values, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xticks(range(mat.shape[1]), mat.columns)
    ax.set_yticks(range(mat.shape[0]), mat.index, fontsize=7)
    for (i, j), v in np.ndenumerate(mat.values):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6)
    fig.colorbar(im, ax=ax, label="FDS (z-score across formats)", orientation="horizontal", pad=0.15)
    ax.set_title("Fairness disparity score FDS_f(g)")
    return figure_md(fig)


def histogram(values: pd.Series, title: str, threshold: float | None = None) -> dg.MetadataValue:
    """Histogram of ``values`` with an optional vertical threshold line."""
    if len(values) == 0:
        return dg.MetadataValue.md("_no values to plot_")
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.hist(values, bins=min(30, max(5, len(values) // 3)))
    if threshold is not None:
        ax.axvline(threshold, color="red", linestyle="--", label=f"threshold {threshold:g}")
        ax.legend(fontsize=7)
    ax.set_title(title)
    ax.set_ylabel("items")
    return figure_md(fig)


def scatter(df: pd.DataFrame, x: str, y: str, title: str) -> dg.MetadataValue:
    """Scatter of ``y`` against ``x`` (both in %), one colour per model."""
    if df.empty:
        return dg.MetadataValue.md("_no rows to plot_")
    fig, ax = plt.subplots(figsize=(4.8, 4))
    for model, g in df.groupby("model_id"):
        ax.scatter(g[x], g[y], s=18, label=model, alpha=0.8)
    ax.set_xlim(-2, 102)
    ax.set_ylim(-2, 102)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.legend(fontsize=7)
    return figure_md(fig)


def bars(df: pd.DataFrame, label: str, value: str, title: str) -> dg.MetadataValue:
    """Simple bar chart of ``value`` per ``label``."""
    if df.empty:
        return dg.MetadataValue.md("_no rows to plot_")
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(df[label].astype(str), df[value])
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=30)
    return figure_md(fig)


def mean_with_ci(df: pd.DataFrame, indices: Sequence[str]) -> dg.MetadataValue:
    """The mean of each of ``indices`` (the wrapper study's FSI and PSI) per model with their 95% CIs
    (error bars; none when n_tasks < 2)."""
    d = df[df["index"].isin(indices)].dropna(subset=["mean"])
    if d.empty:
        return dg.MetadataValue.md("_no indices to plot_")
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    models = sorted(d["model_id"].unique())
    for j, idx in enumerate(indices):
        part = d[d["index"] == idx].set_index("model_id")
        xs = np.arange(len(models)) + (j - 0.5) * 0.3
        means = [part["mean"].get(m, np.nan) for m in models]
        lo = [
            m - part["ci_low"].get(k, np.nan) if pd.notna(part["ci_low"].get(k, np.nan)) else 0
            for m, k in zip(means, models)
        ]
        hi = [
            part["ci_high"].get(k, np.nan) - m if pd.notna(part["ci_high"].get(k, np.nan)) else 0
            for m, k in zip(means, models)
        ]
        ax.bar(xs, means, 0.3, yerr=[lo, hi], capsize=3, label=idx)
    ax.set_xticks(np.arange(len(models)), models, fontsize=7)
    ax.set_ylabel("percentage points")
    ax.set_title("Mean FSI / PSI per model (95% bootstrap CI over tasks)")
    ax.legend(fontsize=7)
    return figure_md(fig)


def _deterministic(table: pd.DataFrame, value: str) -> pd.DataFrame:
    """Rows of the deterministic operators (all rows when there is no operator column) with a value."""
    d = table[table["operator"] == "deterministic"] if "operator" in table else table
    return d.dropna(subset=[value])


def metric_vs_severity(table: pd.DataFrame) -> dg.MetadataValue:
    """One panel per perturbation type: each metric's mean against severity (deterministic rows)."""
    d = _deterministic(table, "mean")
    if d.empty:
        return dg.MetadataValue.md("_no rows to plot_")
    types = sorted(d["type"].unique())
    # panels stacked: side by side they would be too narrow to read at the width the UI shows them
    fig, axes = plt.subplots(len(types), 1, figsize=(4, 2.6 * len(types)), sharex=True, squeeze=False)
    for ax, t in zip(axes[:, 0], types):
        for metric, g in d[d["type"] == t].groupby("metric"):
            g = g.sort_values("severity")
            ax.plot(g["severity"] * 100, g["mean"], marker="o", label=metric)
        ax.set_title(t)
        ax.set_ylabel("mean score")
    axes[-1][0].set_xlabel("severity (%)")
    axes[0][0].legend(fontsize=7, loc="lower left")
    return figure_md(fig, "Mean score against severity, per perturbation type")


def sensitivity_heatmap(matrix: pd.DataFrame) -> dg.MetadataValue:
    """Δ_avg heatmap: metrics × perturbation types (deterministic rows)."""
    d = _deterministic(matrix, "delta_avg")
    if d.empty:
        return dg.MetadataValue.md("_no rows to plot_")
    mat = d.pivot_table(index="metric", columns="type", values="delta_avg")
    fig, ax = plt.subplots(figsize=(1.8 + 1.3 * mat.shape[1], 0.8 + 0.4 * mat.shape[0]))
    im = ax.imshow(mat.values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(mat.shape[1]), mat.columns)
    ax.set_yticks(range(mat.shape[0]), mat.index)
    for (i, j), v in np.ndenumerate(mat.values):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white")
    fig.colorbar(im, ax=ax, label="Δ_avg")
    ax.set_title("Sensitivity Δ_avg = 2.5·[s̄(10%) − s̄(50%)]")
    return figure_md(fig)


# --------------------------------------------------------------------------- OrderProbe


def _order_series(df: pd.DataFrame) -> list[tuple[str, str]]:
    return sorted({(r.model_id, r.setting) for r in df.itertuples()})


def order_recovery_by(df: pd.DataFrame, level: str, title: str) -> dg.MetadataValue:
    """Grouped bars of ``recovery_pct`` (0–100 %) per value of column ``level`` (language or
    structure), one bar per model × setting, with the bootstrap 95% CI as error bars."""
    d = df.dropna(subset=["recovery_pct"])
    if d.empty:
        return dg.MetadataValue.md("_no rows to plot_")
    levels = sorted(d[level].astype(str).unique())
    series = _order_series(d)
    fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(levels), 3.4))
    width = 0.8 / len(series)
    for i, (m, s) in enumerate(series):
        part = d[(d.model_id == m) & (d.setting == s)].set_index(d[level].astype(str).name)
        part.index = part.index.astype(str)
        y = np.array([part["recovery_pct"].get(v, np.nan) for v in levels], dtype=float)
        lo = np.array([part["ci_low_pct"].get(v, np.nan) for v in levels], dtype=float)
        hi = np.array([part["ci_high_pct"].get(v, np.nan) for v in levels], dtype=float)
        err = [np.nan_to_num(y - lo), np.nan_to_num(hi - y)]
        ax.bar(np.arange(len(levels)) + i * width, y, width, yerr=err, capsize=2, label=f"{m} · {s}")
    return _grouped_bars_md(fig, ax, levels, width, "recovery %", title, fontsize=7, rotation=20)


def order_recovery_by_pattern(df: pd.DataFrame) -> dg.MetadataValue:
    """Recovery (%) over the 23 permutation patterns (x, lexicographic), one line per model ×
    setting (rows of ``recovery_breakdown`` with dimension 'pattern')."""
    d = df.dropna(subset=["recovery_pct"])
    if d.empty:
        return dg.MetadataValue.md("_no rows to plot_")
    patterns = sorted(d["level"].unique())
    fig, ax = plt.subplots(figsize=(8, 3.4))
    for m, s in _order_series(d):
        part = d[(d.model_id == m) & (d.setting == s)].set_index("level")["recovery_pct"]
        ax.plot(range(len(patterns)), [part.get(p, np.nan) for p in patterns], marker="o", ms=3, label=f"{m} · {s}")
    ax.set_xticks(range(len(patterns)), patterns, fontsize=7, rotation=60)
    ax.set_ylim(0, 100)
    ax.set_ylabel("recovery %")
    ax.set_title("Recovery by permutation pattern (all languages)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.25))  # below: narrow enough to show inline
    return figure_md(fig)


def report_card_by_study(card: pd.DataFrame) -> dg.MetadataValue:
    """One panel per study: its headline metrics on x, one bar per model side by side, 95% CI
    whiskers (current versions only; % and pp share the y axis, labelled per panel)."""
    cur = card[card["is_current"]] if len(card) else card
    cur = cur[cur["value"].notna()] if len(cur) else cur
    if cur.empty:
        return dg.MetadataValue.md("_no headline numbers to plot_")
    studies = sorted(cur["study"].unique())
    models = sorted(cur["model_id"].unique())
    # one panel per study, stacked: side by side they would be too narrow to read inline
    fig, axes = plt.subplots(len(studies), 1, figsize=(4.2, 3.0 * len(studies)), squeeze=False)
    width = 0.8 / len(models)
    for ax, study in zip(axes[:, 0], studies):
        part = cur[cur["study"] == study].assign(
            label=lambda d: d["metric"] + np.where(d["slice"] == "all", "", "\n" + d["slice"])
        )
        labels = list(dict.fromkeys(part.sort_values(["metric", "slice"])["label"]))
        for i, m in enumerate(models):
            rows = part[part["model_id"] == m].set_index("label").reindex(labels)
            low = (rows["value"] - rows["ci_low"]).clip(lower=0).fillna(0)
            high = (rows["ci_high"] - rows["value"]).clip(lower=0).fillna(0)
            ax.bar(
                np.arange(len(labels)) + i * width,
                rows["value"].to_numpy(),
                width,
                yerr=[low.to_numpy(), high.to_numpy()],
                capsize=2,
                label=m,
            )
        ax.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, labels, fontsize=7)
        ax.set_ylabel(" / ".join(sorted(part["unit"].unique())))
        ax.set_title(study, fontsize=9)
    axes[-1][0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.25))  # below: narrow enough inline
    fig.tight_layout()
    return figure_md(fig, "Headline metrics per study and model (current versions, 95% CI)")


def report_card_trends(series: pd.DataFrame) -> dg.MetadataValue:
    """:func:`report_card_trends_figure` as a PNG, or a note when there is nothing to plot."""
    fig = report_card_trends_figure(series)
    if fig is None:
        return dg.MetadataValue.md("_no headline numbers to plot_")
    return figure_md(fig, "Headline metrics across each model's versions (95% CI)")


def report_card_trends_figure(series: pd.DataFrame):
    """One panel per study · metric: each model's value (per slice) across its versions, oldest
    left, with 95% CI whiskers; points labelled with the version (registry fingerprint, 8 hex).
    x is the version's ordinal within its model (1 = the oldest), one tick per ordinal.
    ``series``: metamorph.report_card.trend_series. None when no value is there to plot."""
    if series.empty or series["value"].notna().sum() == 0:
        return None
    panels = list(dict.fromkeys(zip(series["study"], series["metric"])))
    # one column of panels: the UI shows the figure about 360 px wide, its text at least 10 px
    cols = 1
    rows = len(panels)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2, 2.6 * rows), squeeze=False)
    for ax, (study, metric) in zip(axes.flat, panels):
        part = series[(series["study"] == study) & (series["metric"] == metric)]
        versions = 1
        for (model, sl), g in part.groupby(["model_id", "slice"], sort=True):
            x = np.arange(1, len(g) + 1)
            versions = max(versions, len(g))
            low = (g["value"] - g["ci_low"]).clip(lower=0).fillna(0).to_numpy()
            high = (g["ci_high"] - g["value"]).clip(lower=0).fillna(0).to_numpy()
            ax.errorbar(
                x,
                g["value"].to_numpy(),
                yerr=[low, high],
                marker="o",
                capsize=2,
                label=model + ("" if sl == "all" else f" ({sl})"),
            )
            for xi, v, ver in zip(x, g["value"], g["version"]):
                ax.annotate(str(ver)[:8], (xi, v), fontsize=6, textcoords="offset points", xytext=(3, 3))
        ax.set_xticks(range(1, versions + 1), [str(v) for v in range(1, versions + 1)], fontsize=7)
        ax.set_xlim(0.5, versions + 0.5)
        ax.set_title(f"{study} · {metric}", fontsize=8)
        ax.set_xlabel("version (1 = oldest)", fontsize=7)
        ax.set_ylabel(" / ".join(sorted(part["unit"].unique())), fontsize=7)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig
