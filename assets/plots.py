"""matplotlib figures shown in the Dagster UI (embedded as base64 PNG metadata)."""

from __future__ import annotations

import dagster as dg
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from assets._common import figure_md  # noqa: E402

FORMAT_ORDER = ["txt", "md", "json", "csv"]


def _formats(df: pd.DataFrame) -> list[str]:
    present = list(dict.fromkeys(df["format"]))
    return [f for f in FORMAT_ORDER if f in present] + sorted(f for f in present if f not in FORMAT_ORDER)


def bars_by_format(df: pd.DataFrame, value: str, title: str) -> dg.MetadataValue:
    """Grouped bars: one group per format, one bar per workflow × dataset, ``value`` on y (0–100 %)."""
    if df.empty:
        return dg.MetadataValue.md("_no rows to plot_")
    fmts = _formats(df)
    series = sorted({(r.workflow_id, r.dataset) for r in df.itertuples()})
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(fmts), 3.4))
    width = 0.8 / len(series)
    for i, (wf, ds) in enumerate(series):
        part = df[(df.workflow_id == wf) & (df.dataset == ds)].set_index("format")[value]
        ax.bar(np.arange(len(fmts)) + i * width, [part.get(f, np.nan) for f in fmts], width, label=f"{wf} · {ds}")
    ax.set_xticks(np.arange(len(fmts)) + 0.4 - width / 2, fmts)
    ax.set_ylim(0, 100)
    ax.set_ylabel("%")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return figure_md(fig)


def fds_heatmap(df: pd.DataFrame) -> dg.MetadataValue:
    """FDS_f(g) heatmap: rows = workflow · dataset · factor, columns = formats."""
    d = df.dropna(subset=["fds"]) if not df.empty else df
    if d.empty:
        return dg.MetadataValue.md("_no sensitive factors with ≥ 2 groups: nothing to plot_")
    d = d.assign(row=d.workflow_id + " · " + d.dataset + " · " + d.factor)
    mat = d.pivot_table(index="row", columns="format", values="fds")[_formats(d)]
    fig, ax = plt.subplots(figsize=(2.5 + 1.0 * mat.shape[1], 0.9 + 0.32 * mat.shape[0]))
    lim = max(1.0, float(np.nanmax(np.abs(mat.values))))
    im = ax.imshow(mat.values, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xticks(range(mat.shape[1]), mat.columns)
    ax.set_yticks(range(mat.shape[0]), mat.index, fontsize=7)
    for (i, j), v in np.ndenumerate(mat.values):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6)
    fig.colorbar(im, ax=ax, label="FDS (z-score across formats)")
    ax.set_title("Fairness disparity score FDS_f(g)")
    return figure_md(fig)
