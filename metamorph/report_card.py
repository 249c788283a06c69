"""The robustness report card: each model's headline numbers across studies, with CIs, and the
change since the previous version of that model.

Each study contributes **card rows** (:data:`CARD_ROW_COLUMNS`; its ``report.py`` builds them
from its own tables): one number per (model, study, metric, slice) with its 95% CI. A model's
*version* in a study is the registry fingerprint its generations were produced with; when a
model is re-evaluated under a new version, the card keeps the rows of the old version as
history (``is_current`` false) and every current row names the most recent earlier version of
the same (model, study, metric, slice) with its value and the difference (:func:`build_card`).

Pure library: no Dagster.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from metamorph.comparison import slice_label
from metamorph.export import MISSING, js_length, markdown_cell
from metamorph.schemas import require_columns
from metamorph.stats import bootstrap_ratio_ci

__all__ = [
    "CARD_COLUMNS",
    "CARD_ROW_COLUMNS",
    "build_card",
    "card_markdown",
    "clustered_rate_rows",
    "detectable_markdown",
    "regressions_markdown",
    "study_tag",
    "trend_key",
    "trend_series",
]

CARD_ROW_COLUMNS = [
    "model_id",
    "study",
    "metric",
    "slice",
    "unit",
    "value",
    "ci_low",
    "ci_high",
    "n",
    "higher_is_better",
]
CARD_COLUMNS = [
    *CARD_ROW_COLUMNS,
    "version",
    "recorded_at",
    "is_current",
    "previous_version",
    "previous_value",
    "delta",
]
_CELL = ["model_id", "study", "metric", "slice"]


def clustered_rate_rows(
    frame: pd.DataFrame,
    *,
    study: str,
    metric: str,
    value: str,
    cluster: Sequence[str],
    slices: Sequence[str] = (),
    model: str = "model_id",
    higher_is_better: bool = True,
    n_resamples: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Card rows of a rate in percent: ``100 · mean(value)`` per (model, slice), with a
    percentile bootstrap 95% CI that resamples clusters (items; their repeats, seeds or groups
    move together: :func:`metamorph.stats.bootstrap_ratio_ci`). ``n`` counts clusters.

    Args:
        frame: one row per observation; ``value`` boolean or 0/1, never missing (filter the
            rows that do not count first).
        cluster: columns identifying a cluster (an item).
        slices: columns of the slice (none = ``all``).

    Raises:
        ValueError: a missing column or a missing ``value``.
    """
    require_columns(frame, [model, value, *cluster, *slices], f"clustered_rate_rows({metric})")
    if frame[value].isna().any():
        raise ValueError(
            f"clustered_rate_rows({metric}): {int(frame[value].isna().sum())} row(s) with a missing {value!r}"
        )
    rows = []
    df = frame.assign(_v=frame[value].astype(float))
    for key, grp in df.groupby([model, *slices], sort=True):
        key = key if isinstance(key, tuple) else (key,)
        per = grp.groupby(list(cluster), sort=True)["_v"].agg(["sum", "size"])
        ci = bootstrap_ratio_ci(per["sum"], per["size"], n_resamples=n_resamples, seed=seed)
        rows.append(
            {
                "model_id": str(key[0]),
                "study": study,
                "metric": metric,
                "slice": slice_label(dict(zip(slices, key[1:]))),
                "unit": "%",
                "value": 100 * ci.mean,
                "ci_low": math.nan if ci.low is None else 100 * ci.low,
                "ci_high": math.nan if ci.high is None else 100 * ci.high,
                "n": ci.n,
                "higher_is_better": higher_is_better,
            }
        )
    return pd.DataFrame(rows, columns=CARD_ROW_COLUMNS)


def build_card(
    rows: pd.DataFrame,
    versions: Mapping[tuple[str, str], str],
    recorded_at: pd.Timestamp,
    previous: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The report card: the current ``rows`` with their versions and the diff against the
    previous version, followed by the history kept from ``previous``.

    Args:
        rows: card rows (:data:`CARD_ROW_COLUMNS`) of every study, one per cell
            (model_id, study, metric, slice).
        versions: ``(model_id, study) -> version`` (the registry fingerprint the study's
            generations were made with); every (model, study) of ``rows`` needs one.
        recorded_at: when this card is computed (naive UTC); stored on current rows.
        previous: the card as last written (:data:`CARD_COLUMNS`), or None.

    Returns:
        :data:`CARD_COLUMNS`. Current rows (``is_current``) first, sorted by model, study,
        metric, slice; ``previous_version`` / ``previous_value`` / ``delta`` (= value −
        previous value, in the row's unit) come from the latest history row of the same cell
        with another version, or are null. History rows: every row of ``previous`` whose
        (model, study, version) is not current — the same version is replaced by this
        computation, so re-running a version does not make it its own predecessor.

    Raises:
        ValueError: missing columns, duplicate cells, a (model, study) without a version.
    """
    require_columns(rows, CARD_ROW_COLUMNS, "build_card(rows)")
    dup = rows.duplicated(_CELL)
    if dup.any():
        raise ValueError(f"build_card: duplicate card cell(s) {rows[dup][_CELL].head(3).values.tolist()}")
    missing = sorted({(m, s) for m, s in zip(rows["model_id"], rows["study"])} - set(versions))
    if missing:
        raise ValueError(f"build_card: no version for (model, study) {missing}")
    cur = rows[CARD_ROW_COLUMNS].copy()
    cur["version"] = [versions[(m, s)] for m, s in zip(cur["model_id"], cur["study"])]
    cur["recorded_at"] = pd.Timestamp(recorded_at)
    cur["is_current"] = True
    if previous is not None and len(previous):
        require_columns(previous, CARD_COLUMNS, "build_card(previous)")
        current_versions = set(zip(cur["model_id"], cur["study"], cur["version"]))
        keep = [
            (m, s, v) not in current_versions
            for m, s, v in zip(previous["model_id"], previous["study"], previous["version"])
        ]
        hist = previous[keep].copy()
        hist["is_current"] = False
    else:
        hist = pd.DataFrame(columns=CARD_COLUMNS)
    prev_of = {}
    if len(hist):
        latest = hist.sort_values("recorded_at").groupby(_CELL, sort=False).tail(1)
        prev_of = {tuple(r[c] for c in _CELL): (r["version"], r["value"]) for _, r in latest.iterrows()}
    pv = [prev_of.get(tuple(r[c] for c in _CELL)) for _, r in cur.iterrows()]
    cur["previous_version"] = [p[0] if p else None for p in pv]
    cur["previous_value"] = [float(p[1]) if p else math.nan for p in pv]
    cur["delta"] = cur["value"] - cur["previous_value"]
    cur = cur.sort_values(_CELL).reset_index(drop=True)
    hist = hist.sort_values([*_CELL, "recorded_at"]).reset_index(drop=True)
    out = pd.concat([cur[CARD_COLUMNS], hist[CARD_COLUMNS]], ignore_index=True) if len(hist) else cur[CARD_COLUMNS]
    out["is_current"] = out["is_current"].astype(bool)
    out["n"] = out["n"].astype(int)
    return out.reset_index(drop=True)


def _ci_text(r) -> str:
    ci = "" if math.isnan(r.ci_low) else f" [{r.ci_low:.1f}, {r.ci_high:.1f}]"
    unit = "" if r.unit == "%" else f" {r.unit}"
    return f"{r.value:.1f}{ci}{unit}"


def _delta_text(r) -> str:
    return MISSING if math.isnan(r.delta) else f"{r.delta:+.1f} vs {str(r.previous_version)[:8]}"


def card_markdown(card: pd.DataFrame, limit: int | None = None) -> str:
    """The current rows of ``card`` for a narrow pane: per model and study a line
    ``**<model>** · <study> · version <8 characters>`` and a three-column table, one row per
    metric (and slice): ``value [ci_low, ci_high]`` and the change since the previous version
    (``+x vs <version>``, ``–`` without one). With ``limit`` (characters, as
    :func:`metamorph.export.js_length` counts them) the sections that fit, then a line saying how
    many are left out (the card's table holds them)."""
    cur = card[card["is_current"]] if len(card) else card
    if cur.empty:
        return "_no model has been evaluated in any study yet_"
    sections = []
    for (model, study), g in cur.groupby(["model_id", "study"], sort=True):
        versions = ", ".join(sorted({str(v)[:8] for v in g["version"]}))
        rows = [
            f"| {markdown_cell(r.metric + ('' if r.slice == 'all' else f' ({r.slice})'))} | {_ci_text(r)} "
            f"| {_delta_text(r)} |"
            for r in g.itertuples()
        ]
        sections.append(
            "\n".join(
                [
                    f"**{markdown_cell(model)}** · {study} · version {versions}",
                    "",
                    "| metric | value [95% CI] | Δ |",
                    "|---|---|---|",
                    *rows,
                ]
            )
        )
    text = "\n\n".join(sections)
    if limit is None or js_length(text) < limit:
        return text
    for k in range(len(sections) - 1, -1, -1):
        text = "\n\n".join(
            [
                *sections[:k],
                f"_{len(sections) - k} of {len(sections)} model × study sections not shown here: the table holds them_",
            ]
        )
        if js_length(text) < limit:
            return text
    return text


def regressions_markdown(regressions: pd.DataFrame) -> str | None:
    """The card's top section: one line per candidate and study with a blocking regression — how
    many, and the largest drop with its CI and Holm p-value (``regressions``: regressed rows of the
    studies' ``model_comparison`` with a ``study`` column, differences as fractions; every row is in
    the card check's ``regressed_rows``), or None when there is none."""
    if regressions.empty:
        return None
    lines = ["**Regressed candidates** (blocking regressions after Holm; every row: the card's check):"]
    for (cand, study), g in regressions.groupby(["candidate_id", "study"], sort=True):
        r = next(g.sort_values("difference", kind="stable").itertuples())  # the largest drop
        lines.append(
            f"- **{cand}** in {study}: {len(g)} regression(s), largest {r.metric} ({r.slice}) "
            f"{100 * r.difference:+.1f} pp [{100 * r.ci_low:+.1f}, {100 * r.ci_high:+.1f}], p (Holm) {r.p_holm:.3g}"
        )
    return "\n".join(lines)


def detectable_markdown(comparison: pd.DataFrame) -> str | None:
    """The card's section on what the verdicts could have seen: per candidate and study, its
    ``no detectable change`` rows (``comparison``: the studies' ``model_comparison`` rows with a
    ``study`` column, ``mde`` as fractions) — the range of regressions they could have detected
    (``mde``, smallest and largest, with their slices) and how many could give no verdict at all
    (``mde_note``). None when no row says ``no detectable change`` (or the rows predate ``mde``)."""
    if comparison.empty or "mde" not in comparison.columns:
        return None
    quiet = comparison[comparison["verdict"] == "no detectable change"]
    if quiet.empty:
        return None
    lines = [
        "**What the verdicts could have seen** (rows with no detectable change: the smallest regression each "
        "could detect, at Holm's guaranteed level α/m and the comparison's power):"
    ]
    for (cand, study), g in quiet.groupby(["candidate_id", "study"], sort=True):
        sized = g[g["mde"].notna()].sort_values("mde")
        parts = [f"{len(g)} row(s) with no detectable change"]
        if len(sized):
            lo, hi = sized.iloc[0], sized.iloc[-1]
            span = f"≥ {100 * lo.mde:.1f} pp ({lo.metric}, {lo.slice})"
            if len(sized) > 1:
                span += f" to ≥ {100 * hi.mde:.1f} pp ({hi.metric}, {hi.slice})"
            parts.append(f"{len(sized)} could detect a regression of {span}")
        none = g[g["mde"].isna()]
        if len(none):
            parts.append(f"{len(none)} could give no verdict at all ({none['mde_note'].iloc[0]})")
        lines.append(f"- **{cand}** in {study}: " + "; ".join(parts))
    return "\n".join(lines)


def trend_series(card: pd.DataFrame) -> pd.DataFrame:
    """Every headline cell's history: one point per version (registry fingerprint) of the model,
    oldest first — ``model_id, study, metric, slice, unit, version, recorded_at, value, ci_low,
    ci_high, is_current`` from the card's current and history rows."""
    cols = [
        "model_id",
        "study",
        "metric",
        "slice",
        "unit",
        "version",
        "recorded_at",
        "value",
        "ci_low",
        "ci_high",
        "is_current",
    ]
    if card.empty:
        return pd.DataFrame(columns=cols)
    return card[cols].sort_values([*_CELL, "recorded_at"]).reset_index(drop=True)


def study_tag(study: str) -> str:
    """A study's short tag in metadata keys: the initials of its name's words (``some_study_name``
    → ``SSN``)."""
    return "".join(w[0] for w in study.split("_") if w).upper()


def trend_key(model_id: str, study: str, metric: str, slice_: str) -> str:
    """The float metadata key of one headline cell, short enough for the UI's key column:
    ``<model>/<study tag>/<metric>`` and the slice's values (``cand/SSN/M1/inline`` for study
    ``some_study_name``, slice ``ingestion=inline``; :func:`study_tag`)."""
    values = [] if slice_ == "all" else [part.split("=", 1)[-1] for part in slice_.split(", ")]
    return "/".join([model_id, study_tag(study), metric, *values])
