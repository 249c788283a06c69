"""Diagnostics of the wrapper study beside FSI/PSI: the compliance / conditional decomposition
(review major 1), win counts per wrapper, FSI on the token-matched subset, and the
constrained-decoding falsifier.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from metamorph.schemas import require_columns
from metamorph.studies.wrapper_sensitivity.metrics import (
    COMBINATION_KEYS,
    DEFAULT_MODE,
    TIE_TOL,
    best_worst,
    cell_rows,
    combination_not_measurable,
    tied_wrappers,
    ordered_wrappers,
    pct_or_nan,
    validate_cells,
    cell_metrics,
    fsi_psi,
    validate_scored,
)
from metamorph.studies.wrapper_sensitivity.schemas import WrapperDecomposition, WrapperMatchedFSI, WrapperWins
from metamorph.studies.wrapper_sensitivity.vocab import CONSTRAINED_ARM

__all__ = [
    "constrained_falsifier",
    "decomposition",
    "matched_fsi",
    "win_counts",
]


def decomposition(cells: pd.DataFrame, undefined_conditional: str = "null") -> pd.DataFrame:
    """Split each FSI into a compliance-driven and a conditional-accuracy-driven part (review major 1).

    Source: the review's major comment 1 on §3.5 / §5.2 (A = P · Acc|parse, so Acc ≤ P by
    construction; "report an FSI decomposition into compliance-driven vs
    conditional-accuracy-driven components").

    Per (model, task), b = best and w = worst wrapper by accuracy. When several wrappers tie at
    the top (bottom), b (w) is the first of them in the canonical wrapper order, named in
    ``best_wrapper`` / ``worst_wrapper`` and the tie said in ``note`` (:func:`fsi_psi` lists all
    tied wrappers). With fractions P (parseability), C (Acc | parseable) and A = P · C:

        FSI = A_b − A_w = ΔP · C̄ + ΔC · P̄,     ΔX = X_b − X_w,  X̄ = (X_b + X_w)/2,

    the symmetric (Shapley) two-factor split: the average of the two one-at-a-time paths
    (change P first, then C; or C first, then P). It is exact — ``compliance_pp`` (ΔP·C̄)
    + ``conditional_pp`` (ΔC·P̄) = ``fsi_pp`` — and has no order or residual term. Parts
    are in pp (×100); ``compliance_share`` = compliance / FSI (null when FSI = 0; outside
    [0, 1] when the parts have opposite signs, e.g. a wrapper that parses more often but
    is less accurate when it parses). P and C come from the counts (n, n_parseable,
    n_correct), FSI from ``accuracy_pct``.

    A wrapper with **no parseable generation** has C undefined (A = 0 = 0 · C for any C).
    ``undefined_conditional`` says what then happens:

    * ``"null"`` (default): C stays undefined, so ΔC, C̄, both parts and the share are null,
      with the reason in ``note``; ``fsi_pp``, ΔP and P̄ (always defined) are still reported.
      The parts are computed only where both ends have a parseable generation: with P_w = 0
      nothing observed says how accurate w would be when it parses, so no split is claimed.
    * ``"match"`` (the earlier default, kept as a named option): C := the other wrapper's C
      (ΔC = 0, the whole difference is compliance); both undefined -> C = 0 for both.
    * ``"zero"``: C := 0, with a note. Beware: if the worst wrapper has P_w = 0, this
      attributes half of the FSI to conditional accuracy (ΔP·C̄ = ΔC·P̄ = P_b·C_b/2) although
      only compliance differs.

    A (model, task) with a single wrapper has null values and a note.

    Call errors: pass the paired cells FSI compares (``cell_metrics(..., paired=True)``);
    ``n_call_errors`` sums the cells' failed calls, and a (model, task) where a wrapper has no
    reply left has null values with that cell's ``not_measurable`` text ("not measurable: every
    call failed (N of N)" when every call of the model × task failed).

    Raises:
        ValueError: missing columns; an unknown ``undefined_conditional``; counts that do
            not reproduce ``accuracy_pct`` (cells of another computation).

    Returns:
        :class:`~metamorph.studies.wrapper_sensitivity.schemas.WrapperDecomposition`: ``model_id,
        task, best_wrapper, worst_wrapper, fsi_pp, delta_parse_pp,
        delta_acc_given_parse_pp, mean_parse_pct, mean_acc_given_parse_pct,
        compliance_pp, conditional_pp, compliance_share, note, n_call_errors, not_measurable`` (pp =
        percentage points, pct = percent).
    """
    if undefined_conditional not in ("null", "zero", "match"):
        raise ValueError(
            f"decomposition: undefined_conditional must be 'null', 'zero' or 'match', got {undefined_conditional!r}"
        )
    c = validate_cells(
        cells,
        ["accuracy_pct", "n", "n_correct", "n_parseable", "n_call_errors", "n_unpaired", "not_measurable"],
        "cells",
    )
    n = c["n"].astype(float)
    replied = n >= 1
    if (np.abs(100.0 * c["n_correct"].astype(float) / n - c["accuracy_pct"].astype(float)) > 1e-6)[replied].any():
        raise ValueError("decomposition: accuracy_pct differs from 100 * n_correct / n in some cell")
    rows = []
    for (m, t), grp in c.groupby(COMBINATION_KEYS, sort=True):
        n_errors = int(grp["n_call_errors"].sum())
        row = dict(model_id=m, task=t, n_call_errors=n_errors, not_measurable=None)
        unmeasurable = combination_not_measurable(grp)
        if unmeasurable:
            row["not_measurable"] = unmeasurable
            rows.append(row)
            continue
        if len(grp) < 2:
            row["note"] = f"1 wrapper ({grp['wrapper'].iloc[0]}): no pair, FSI undefined"
            rows.append(row)
            continue
        tied_best, tied_worst = tied_wrappers(grp)
        b, w = best_worst(grp)
        notes = []
        if len(tied_best) == len(grp):
            notes.append(f"all {len(grp)} wrappers tie (FSI = 0): split of {b['wrapper']!r} vs {w['wrapper']!r}")
        else:
            for name, tied in (("best", tied_best), ("worst", tied_worst)):
                if len(tied) > 1:
                    notes.append(f"{name} accuracy tied by {', '.join(tied)}: split uses {tied[0]!r}")
        pb, pw = float(b["n_parseable"] / b["n"]), float(w["n_parseable"] / w["n"])
        cb = float(b["n_correct"] / b["n_parseable"]) if b["n_parseable"] > 0 else None
        cw = float(w["n_correct"] / w["n_parseable"]) if w["n_parseable"] > 0 else None
        for name, val, other, wr in (("best", cb, cw, b["wrapper"]), ("worst", cw, cb, w["wrapper"])):
            if val is not None:
                continue
            what = f"{name} wrapper {wr!r} has no parseable generation: Acc|parse undefined"
            if undefined_conditional == "null":
                notes.append(f"{what}, so ΔC, C̄ and the compliance / conditional split are undefined (null)")
            elif undefined_conditional == "match" and other is not None:
                notes.append(f"{what}, set to the other wrapper's")
            else:
                notes.append(f"{what}, set to 0")
        fsi = float(b["accuracy_pct"]) - float(w["accuracy_pct"])
        dp, pbar = pb - pw, (pb + pw) / 2.0
        row.update(
            best_wrapper=b["wrapper"],
            worst_wrapper=w["wrapper"],
            fsi_pp=fsi,
            delta_parse_pp=100.0 * dp,
            mean_parse_pct=100.0 * pbar,
        )
        if undefined_conditional == "match":
            cb, cw = (cw if cb is None else cb), (cb if cw is None else cw)
        if undefined_conditional != "null":
            cb = 0.0 if cb is None else cb
            cw = 0.0 if cw is None else cw
        if cb is not None and cw is not None:
            dc, cbar = cb - cw, (cb + cw) / 2.0
            comp, cond = 100.0 * dp * cbar, 100.0 * dc * pbar
            row.update(
                delta_acc_given_parse_pp=100.0 * dc,
                mean_acc_given_parse_pct=100.0 * cbar,
                compliance_pp=comp,
                conditional_pp=cond,
                compliance_share=comp / fsi if fsi > TIE_TOL else math.nan,
            )
        row["note"] = "; ".join(notes) or None
        rows.append(row)
    cols = [
        "model_id",
        "task",
        "best_wrapper",
        "worst_wrapper",
        "fsi_pp",
        "delta_parse_pp",
        "delta_acc_given_parse_pp",
        "mean_parse_pct",
        "mean_acc_given_parse_pct",
        "compliance_pp",
        "conditional_pp",
        "compliance_share",
        "note",
        "n_call_errors",
        "not_measurable",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for col in cols[4:12]:
        out[col] = out[col].astype(float)
    return WrapperDecomposition.validate(out)


def win_counts(cells: pd.DataFrame) -> pd.DataFrame:
    """Per wrapper, the number of (model, task) combinations where it has the highest accuracy (§5).

    Ties (accuracies within :data:`TIE_TOL` pp of the maximum) give **every** tied wrapper
    a win, so the wins can sum to more than the number of combinations; ``tied_wins``
    counts the shared ones. Only combinations with ≥ 2 wrappers count (a lone wrapper wins
    nothing by default). ``win_pct`` = wins / combinations in which the wrapper has a cell.
    A combination where a wrapper has no reply (every call failed; cells of
    ``cell_metrics(..., paired=True)``) is not compared; ``n_call_errors`` counts the wrapper's
    failed calls over every combination.

    Returns:
        :class:`~metamorph.studies.wrapper_sensitivity.schemas.WrapperWins`: ``wrapper, wins,
        tied_wins, n_combinations, win_pct, n_call_errors`` (every wrapper seen, canonical order).
    """
    c = validate_cells(cells, ["accuracy_pct", "n", "n_call_errors"], "cells")
    wrappers = ordered_wrappers(c["wrapper"])
    wins = dict.fromkeys(wrappers, 0)
    tied = dict.fromkeys(wrappers, 0)
    combos = dict.fromkeys(wrappers, 0)
    errors = c.groupby("wrapper")["n_call_errors"].sum()
    for _, grp in c.groupby(COMBINATION_KEYS, sort=True):
        if len(grp) < 2 or (grp["n"] == 0).any():
            continue
        acc = grp["accuracy_pct"].astype(float)
        top = grp.loc[acc >= acc.max() - TIE_TOL, "wrapper"].tolist()
        for wr in grp["wrapper"]:
            combos[wr] += 1
        for wr in top:
            wins[wr] += 1
            if len(top) > 1:
                tied[wr] += 1
    out = pd.DataFrame(
        [
            dict(
                wrapper=wr,
                wins=wins[wr],
                tied_wins=tied[wr],
                n_combinations=combos[wr],
                win_pct=pct_or_nan(wins[wr], combos[wr]),
                n_call_errors=int(errors.get(wr, 0)),
            )
            for wr in wrappers
        ],
        columns=["wrapper", "wins", "tied_wins", "n_combinations", "win_pct", "n_call_errors"],
    )
    out["win_pct"] = out["win_pct"].astype(float)
    return WrapperWins.validate(out)


def _matched_keys(matched_items: pd.DataFrame | Iterable[tuple]) -> tuple[pd.DataFrame, list[str]]:
    if isinstance(matched_items, pd.DataFrame):
        keys = ["model_id", "task", "item_id"] if "model_id" in matched_items.columns else ["task", "item_id"]
        require_columns(matched_items, keys, "matched_items")
        m = matched_items[keys].astype(str).drop_duplicates()
    else:
        tuples = [tuple(t) for t in matched_items]
        lengths = {len(t) for t in tuples}
        if len(lengths) > 1 or (lengths and lengths.pop() not in (2, 3)):
            raise ValueError(
                "matched_items: give (task, item_id) or (model_id, task, item_id) tuples, all of one length"
            )
        keys = ["model_id", "task", "item_id"] if tuples and len(tuples[0]) == 3 else ["task", "item_id"]
        m = pd.DataFrame(tuples, columns=keys).astype(str).drop_duplicates()
    return m, keys


def matched_fsi(
    scored: pd.DataFrame, matched_items: pd.DataFrame | Iterable[tuple], mode: str = DEFAULT_MODE
) -> pd.DataFrame:
    """FSI / PSI on the token-matched subset next to the full FSI / PSI (§3.3, §5).

    ``matched_items`` are the items whose prompt-token spread over wrappers is small
    (Δtok = (max − min)/mean ≤ 5%): a set of ``(task, item_id)`` tuples, or of
    ``(model_id, task, item_id)`` tuples when Δtok is per model (it is: each model counts
    tokens with its own tokenizer), or a DataFrame with those columns. The matched FSI
    recomputes :func:`cell_metrics` and :func:`fsi_psi` on the generations of the matched
    items only (every wrapper and seed of a matched item is kept). ``delta_fsi_pp`` =
    matched − full; a (model, task) without a matched item has null matched indices and a
    note. Both are computed on paired cells (an item × seed whose call failed under any wrapper
    is left out); ``n_call_errors`` counts the failed calls of the model × task and
    ``not_measurable`` is the full FSI's (:func:`fsi_psi`).

    Returns:
        :class:`~metamorph.studies.wrapper_sensitivity.schemas.WrapperMatchedFSI`: ``model_id, task,
        fsi_full_pp, fsi_matched_pp, delta_fsi_pp, psi_full_pp, psi_matched_pp,
        n_items_full, n_items_matched, note, n_call_errors, not_measurable``.
    """
    s = validate_scored(scored, mode)
    m, keys = _matched_keys(matched_items)
    sub = s.merge(m, on=keys, how="inner")
    full = fsi_psi(cell_rows(s, mode, paired=True)).set_index(COMBINATION_KEYS)
    matched = fsi_psi(cell_rows(sub, mode, paired=True)).set_index(COMBINATION_KEYS) if len(sub) else None
    n_full = s.groupby(COMBINATION_KEYS)["item_id"].nunique()
    n_matched = sub.groupby(COMBINATION_KEYS)["item_id"].nunique()
    rows = []
    for key, fr in full.iterrows():
        nm = int(n_matched.get(key, 0))
        row = dict(
            model_id=key[0],
            task=key[1],
            fsi_full_pp=fr["fsi_pp"],
            psi_full_pp=fr["psi_pp"],
            fsi_matched_pp=math.nan,
            psi_matched_pp=math.nan,
            n_items_full=int(n_full[key]),
            n_items_matched=nm,
            n_call_errors=int(fr["n_call_errors"]),
            not_measurable=fr["not_measurable"],
        )
        notes = []
        if fr["n_wrappers"] < 2:
            notes.append(f"full: {fr['note']}")
        if nm == 0:
            notes.append("no matched item")
        else:
            mr = matched.loc[key]
            row.update(fsi_matched_pp=mr["fsi_pp"], psi_matched_pp=mr["psi_pp"])
            if mr["n_wrappers"] < 2:
                notes.append(f"matched: {mr['note']}")
        row["delta_fsi_pp"] = row["fsi_matched_pp"] - row["fsi_full_pp"]
        row["note"] = "; ".join(notes) or None
        rows.append(row)
    cols = [
        "model_id",
        "task",
        "fsi_full_pp",
        "fsi_matched_pp",
        "delta_fsi_pp",
        "psi_full_pp",
        "psi_matched_pp",
        "n_items_full",
        "n_items_matched",
        "note",
        "n_call_errors",
        "not_measurable",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for col in cols[2:7]:
        out[col] = out[col].astype(float)
    return WrapperMatchedFSI.validate(out)


def constrained_falsifier(scored: pd.DataFrame, mode: str = DEFAULT_MODE) -> pd.DataFrame:
    """The review's proposed falsifier: does FSI collapse when parseability is forced?

    Compares FSI/PSI over the five standard wrappers with FSI/PSI when the ``json`` wrapper's
    free generations are replaced by the constrained-decoding arm ``json_constrained`` (same
    prompts, JSON-schema constrained decoding). Rows only for (model, task) with the arm.

    Returns:
        ``model_id, task, fsi_free_pp, fsi_constrained_pp, delta_fsi_pp, psi_free_pp,
        psi_constrained_pp, json_parse_free_pct, json_parse_constrained_pct`` (pp / %).
    """
    cols = [
        "model_id",
        "task",
        "fsi_free_pp",
        "fsi_constrained_pp",
        "delta_fsi_pp",
        "psi_free_pp",
        "psi_constrained_pp",
        "json_parse_free_pct",
        "json_parse_constrained_pct",
    ]
    arm = scored[scored["wrapper"] == CONSTRAINED_ARM]
    if arm.empty:
        return pd.DataFrame(columns=cols)
    pairs = arm[["model_id", "task"]].drop_duplicates()
    sub = scored.merge(pairs, on=["model_id", "task"])
    free = sub[sub["wrapper"] != CONSTRAINED_ARM]
    forced = sub[sub["wrapper"] != "json"].assign(wrapper=lambda d: d["wrapper"].replace({CONSTRAINED_ARM: "json"}))
    cf, cc = cell_metrics(free, mode, paired=True), cell_metrics(forced, mode, paired=True)
    ff, fc = fsi_psi(cf), fsi_psi(cc)
    out = ff[["model_id", "task", "fsi_pp", "psi_pp"]].merge(
        fc[["model_id", "task", "fsi_pp", "psi_pp"]], on=["model_id", "task"], suffixes=("_free", "_c")
    )
    jf = cf[cf["wrapper"] == "json"].set_index(["model_id", "task"])["parseability_pct"]
    jc = cc[cc["wrapper"] == "json"].set_index(["model_id", "task"])["parseability_pct"]
    out = pd.DataFrame(
        {
            "model_id": out["model_id"],
            "task": out["task"],
            "fsi_free_pp": out["fsi_pp_free"],
            "fsi_constrained_pp": out["fsi_pp_c"],
            "delta_fsi_pp": out["fsi_pp_c"] - out["fsi_pp_free"],
            "psi_free_pp": out["psi_pp_free"],
            "psi_constrained_pp": out["psi_pp_c"],
            "json_parse_free_pct": [jf.get((m, t)) for m, t in zip(out["model_id"], out["task"])],
            "json_parse_constrained_pct": [jc.get((m, t)) for m, t in zip(out["model_id"], out["task"])],
        }
    )
    return out[cols].reset_index(drop=True)
