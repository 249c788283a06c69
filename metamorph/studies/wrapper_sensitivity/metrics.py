"""Metrics of the prompt-wrapper sensitivity study.

Paper: "Format Sensitivity Index: Token-Controlled Prompt Wrapper Robustness and Schema
Compliance in LLM Benchmarking" (arXiv 2607.09665), §4 (indices) and §5 (analyses), and a
published review of it whose objections are answered here: **major 1** (decompose FSI into
a compliance part and a conditional-accuracy part, :func:`decomposition`), **major 3**
(item-level model with cluster-robust SEs, :func:`item_level_model`) and **minor 2** (a
bounded, chance-adjusted nFSI, ``nfsi_chance`` in :func:`fsi_psi`).

Input: the scored-generations frame
-----------------------------------
One row per generation × extraction mode, columns :data:`SCORED_COLUMNS`:
``model_id`` str, ``task`` str, ``answer_type`` (choice / boolean / numeric), ``wrapper``
str (plain / json / structured / structured_delim / deliberate, or another arm such as a
constrained-decoding one), ``item_id`` str, ``seed`` int, ``mode`` (paper / strict /
normalized / lenient), ``parseable`` bool, ``correct`` bool (False when unparseable), ``finish_reason``
str or None, ``prompt_tokens`` int or None, ``n_choices`` int or None (choice tasks; the
chance level is 1/n_choices for choice, 0.5 for boolean, 0 for numeric).

:func:`validate_scored` checks it (every function taking ``scored`` calls it): missing
columns (named), null keys, unknown modes / answer types, non-boolean ``parseable`` /
``correct``, ``correct`` without ``parseable``, duplicate generation keys
``(model_id, task, wrapper, item_id, seed, mode)``, a task with several answer types and
``n_choices < 2`` raise :class:`ValueError`. Functions take a ``mode`` argument (default
``"paper"``, the paper's extractor: :data:`DEFAULT_MODE`) and use only that slice; a mode absent from the frame is an error.

Conventions shared by all functions
-----------------------------------
* Percentages are in percent (0–100); differences of percentages in percentage points (pp).
* An index over wrappers needs a pair: a (model, task) with a single wrapper has null
  FSI / PSI / nFSI and a ``note``; it never counts as "FSI = 0".
* Items are identified by ``(task, item_id)`` (item ids may repeat across tasks).
* Ties between wrappers (accuracies within :data:`TIE_TOL` pp) are reported as ties:
  :func:`fsi_psi` lists every tied best / worst wrapper (``best_wrapper = "plain, json"``) with
  their count and an ``all_tied`` flag; only where one wrapper must be picked (the two ends of
  the decomposition) the first in the canonical order :data:`WRAPPER_ORDER` is used, and said
  so in a note. Output rows are sorted by model_id, task, then wrapper in that order.
* FSI / PSI are reported as fractions in [0, 1] like the paper (``fsi``, ``psi``; e.g. 0.763)
  and in percentage points (``fsi_pp``, ``psi_pp`` = 100 × the fraction).
* Every output is validated by its schema in :mod:`metamorph.studies.wrapper_sensitivity.schemas`.
* A call that failed at the provider (``reason`` = ``call_error``) is no reply: it is in no
  numerator and no denominator (n, accuracy, parseability, Acc|parse, truncation), and each
  table counts it in ``n_call_errors``. A cell whose every call failed keeps its row with null
  metrics and ``not_measurable`` = "not measurable: every call failed (N of N)". FSI / PSI
  compare the wrappers on the same item × seed, so an item × seed whose call failed under any
  wrapper is left out of that comparison (``paired`` cells, ``n_unpaired``), never filled in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from metamorph import stats
from metamorph.measurability import every_call_failed, is_call_error, no_reply_parsed
from metamorph.ordering import LevelOrder
from metamorph.schemas import require_columns
from metamorph.studies.wrapper_sensitivity.schemas import WrapperCells, WrapperFSI, WrapperMeanIndices
from metamorph.studies.wrapper_sensitivity.vocab import ANSWER_TYPES, DEFAULT_MODE, FAMILIES, INDICES, MODES

__all__ = [
    "SCORED_COLUMNS",
    "WRAPPER_ORDER",
    "MODES",
    "ANSWER_TYPES",
    "DEFAULT_MODE",
    "NFSI_EPS",
    "TIE_TOL",
    "CELL_KEYS",
    "COMBINATION_KEYS",
    "best_worst",
    "cell_rows",
    "combination_not_measurable",
    "ordered_wrappers",
    "pct_or_nan",
    "tied_wrappers",
    "unpaired",
    "validate_cells",
    "validate_scored",
    "cell_metrics",
    "cell_metrics_by_mode",
    "fsi_psi",
    "mean_indices",
]

#: Columns of the scored-generations frame (the input contract).
SCORED_COLUMNS = (
    "model_id",
    "task",
    "answer_type",
    "wrapper",
    "item_id",
    "seed",
    "mode",
    "parseable",
    "correct",
    "finish_reason",
    "prompt_tokens",
    "n_choices",
    "reason",
)

#: Canonical wrapper order (paper §3.2): sorting, tie-breaking, reference level (plain).
WRAPPER_ORDER = FAMILIES

#: ε of nFSI = FSI / (mean accuracy + ε) (§4).
NFSI_EPS = 1e-6

#: Two accuracies closer than this (pp) are a tie (best/worst wrapper, win counts).
TIE_TOL = 1e-9

#: The key of a combination: one (model, task).
COMBINATION_KEYS = ["model_id", "task"]

#: The key of a cell: one (model, task, wrapper).
CELL_KEYS = ["model_id", "task", "wrapper"]

_GEN_KEY = ["model_id", "task", "wrapper", "item_id", "seed", "mode"]

#: Chance accuracy (percent) of the non-choice answer types; a choice item's is 100 / n_choices.
_CHANCE_FIXED = {"boolean": 50.0, "numeric": 0.0}


_LEVELS = LevelOrder("wrapper", WRAPPER_ORDER)
_wrapper_key = _LEVELS.key
#: The given wrappers in canonical order (:data:`WRAPPER_ORDER`; unknown ones after, sorted).
ordered_wrappers = _LEVELS.ordered
_sort = _LEVELS.sort


def _as_bool(series: pd.Series, col: str) -> pd.Series:
    def conv(v: object) -> bool:
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, (int, np.integer, float, np.floating)) and v in (0, 1):
            return bool(v)
        raise ValueError(f"scored: column '{col}' must be boolean, found {v!r}")

    return series.map(conv).astype(bool)


def validate_scored(scored: pd.DataFrame, mode: str | None = None) -> pd.DataFrame:
    """Check the scored-generations frame and return a normalised copy (input not modified).

    With ``mode`` given, only that extraction mode's rows are returned (after validating
    the whole frame). Ids become ``str``, ``seed`` int, ``parseable``/``correct`` bool,
    ``n_choices`` a nullable integer; an internal column ``_chance`` holds each
    generation's chance accuracy in percent (NaN when a choice row lacks ``n_choices``) and
    ``_call_error`` whether the call failed at the provider (``reason`` = ``call_error``).

    Raises:
        ValueError: missing columns (named); null ``model_id, task, answer_type, wrapper,
            item_id, seed, mode, parseable, correct``; non-integer seeds; an unknown mode or
            answer type; non-boolean ``parseable``/``correct``; ``correct`` True on an
            unparseable row; a parseable ``call_error`` row;
            duplicate ``(model_id, task, wrapper, item_id, seed, mode)``;
            a task with several answer types; ``n_choices`` < 2 or non-integer on a
            choice row; ``mode`` not in :data:`MODES` or absent from the frame.
    """
    require_columns(scored, SCORED_COLUMNS, "scored")
    if mode is not None and mode not in MODES:
        raise ValueError(f"scored: mode must be one of {list(MODES)}, got {mode!r}")
    s = scored.copy()
    for col in ("model_id", "task", "answer_type", "wrapper", "item_id", "seed", "mode", "parseable", "correct"):
        n_null = int(s[col].isna().sum())
        if n_null:
            raise ValueError(f"scored: column '{col}' has {n_null} null value(s)")
    for col in ("model_id", "task", "answer_type", "wrapper", "item_id", "mode"):
        s[col] = s[col].astype(str)
    seed = pd.to_numeric(s["seed"], errors="coerce")
    if seed.isna().any() or (seed != np.floor(seed)).any():
        raise ValueError("scored: 'seed' must be integers")
    s["seed"] = seed.astype(int)
    bad_mode = sorted(set(s["mode"]) - set(MODES))
    if bad_mode:
        raise ValueError(f"scored: unknown mode(s) {bad_mode}; expected {list(MODES)}")
    bad_at = sorted(set(s["answer_type"]) - set(ANSWER_TYPES))
    if bad_at:
        raise ValueError(f"scored: unknown answer_type(s) {bad_at}; expected {list(ANSWER_TYPES)}")
    s["parseable"] = _as_bool(s["parseable"], "parseable")
    s["correct"] = _as_bool(s["correct"], "correct")
    bad = s["correct"] & ~s["parseable"]
    if bad.any():
        raise ValueError(
            f"scored: {int(bad.sum())} row(s) are correct but not parseable (correct must be False when unparseable)"
        )
    dup = s.duplicated(_GEN_KEY, keep=False)
    if dup.any():
        first = s.loc[dup, _GEN_KEY].iloc[0].to_dict()
        raise ValueError(f"scored: {int(dup.sum())} rows share a generation key, e.g. {first}")
    n_types = s.groupby("task")["answer_type"].nunique()
    if (n_types > 1).any():
        raise ValueError(f"scored: task(s) {sorted(n_types[n_types > 1].index)} have several answer types")
    nc = pd.to_numeric(s["n_choices"], errors="coerce")
    if (s["n_choices"].notna() & nc.isna()).any():
        raise ValueError("scored: 'n_choices' must be integers or null")
    choice = s["answer_type"] == "choice"
    if ((nc != np.floor(nc)) & nc.notna()).any() or (choice & nc.notna() & (nc < 2)).any():
        raise ValueError("scored: 'n_choices' must be an integer >= 2 on choice rows")
    s["n_choices"] = nc.astype("Int64")
    s["_call_error"] = is_call_error(s["reason"])
    if (s["_call_error"] & s["parseable"]).any():
        raise ValueError("scored: a call_error row is parseable (a failed call has no reply)")
    chance = s["answer_type"].map(_CHANCE_FIXED).astype(float)
    s["_chance"] = chance.where(~choice, 100.0 / nc.astype(float))
    if mode is not None:
        if len(s) and mode not in set(s["mode"]):
            raise ValueError(f"scored: no row with mode {mode!r}; modes present {sorted(set(s['mode']))}")
        s = s[s["mode"] == mode].reset_index(drop=True)
    return s


def pct_or_nan(num: float, den: float) -> float:
    """``100 · num / den`` in percent, NaN when ``den`` is 0."""
    return math.nan if den == 0 else 100.0 * num / den


def unpaired(s: pd.DataFrame) -> pd.Series:
    """Per row of a validated one-mode frame, whether its item × seed had a failed call under some
    wrapper of its (model, task): the rows a comparison across wrappers leaves out."""
    key = [*COMBINATION_KEYS, "item_id", "seed"]
    return s.groupby(key, sort=False)["_call_error"].transform("any").astype(bool)


def cell_rows(s: pd.DataFrame, mode: str, paired: bool = False) -> pd.DataFrame:
    """The cell table of :func:`cell_metrics` from an already validated frame ``s`` of one mode,
    unsorted and not schema-validated (the matched-subset diagnostics reuse it).

    Call errors are counted in ``n_call_errors`` and in nothing else; with ``paired``, the other
    replies of an item × seed whose call failed under any wrapper are left out too
    (``n_unpaired``), so every wrapper of a (model, task) is measured on the same item × seeds.
    """
    cols = [
        "model_id",
        "task",
        "answer_type",
        "wrapper",
        "mode",
        "accuracy_pct",
        "parseability_pct",
        "acc_given_parse_pct",
        "truncation_rate_pct",
        "chance_pct",
        "n",
        "n_correct",
        "n_parseable",
        "n_truncated",
        "n_items",
        "n_seeds",
        "n_call_errors",
        "n_unpaired",
        "not_measurable",
    ]
    if len(s) == 0:
        return pd.DataFrame(columns=cols)
    out_pair = unpaired(s) & ~s["_call_error"] if paired else pd.Series(False, index=s.index)
    kept = ~s["_call_error"] & ~out_pair
    s = s.assign(
        _trunc=s["finish_reason"].eq("length").fillna(False).astype(bool) & kept,
        _kept=kept,
        _unpaired=out_pair,
        _correct=s["correct"] & kept,
        _parseable=s["parseable"] & kept,
        _item=s["item_id"].where(kept),
        _seed=s["seed"].where(kept),
        _chance_kept=s["_chance"].where(kept),
        _chance_missing=s["_chance"].isna() & kept,
    )
    agg = (
        s.groupby(CELL_KEYS, sort=False)
        .agg(
            answer_type=("answer_type", "first"),
            n=("_kept", "sum"),
            n_correct=("_correct", "sum"),
            n_parseable=("_parseable", "sum"),
            n_truncated=("_trunc", "sum"),
            n_items=("_item", "nunique"),
            n_seeds=("_seed", "nunique"),
            chance_pct=("_chance_kept", "mean"),
            _chance_missing=("_chance_missing", "any"),
            n_call_errors=("_call_error", "sum"),
            n_unpaired=("_unpaired", "sum"),
            _total=("_call_error", "size"),
        )
        .reset_index()
    )
    for c in ("n", "n_correct", "n_parseable", "n_truncated", "n_call_errors", "n_unpaired"):
        agg[c] = agg[c].astype(int)
    agg["mode"] = mode
    agg["accuracy_pct"] = [pct_or_nan(c, n) for c, n in zip(agg["n_correct"], agg["n"])]
    agg["parseability_pct"] = [pct_or_nan(p, n) for p, n in zip(agg["n_parseable"], agg["n"])]
    agg["acc_given_parse_pct"] = [pct_or_nan(c, p) for c, p in zip(agg["n_correct"], agg["n_parseable"])]
    agg["truncation_rate_pct"] = [pct_or_nan(t, n) for t, n in zip(agg["n_truncated"], agg["n"])]
    agg["chance_pct"] = agg["chance_pct"].where(~agg["_chance_missing"], math.nan)
    agg["not_measurable"] = [
        _cell_not_measurable(n, e, u, p, t)
        for n, e, u, p, t in zip(agg["n"], agg["n_call_errors"], agg["n_unpaired"], agg["n_parseable"], agg["_total"])
    ]
    out = agg[cols].copy()
    for c in ("accuracy_pct", "parseability_pct", "acc_given_parse_pct", "truncation_rate_pct", "chance_pct"):
        out[c] = out[c].astype(float)
    return out


def combination_not_measurable(grp: pd.DataFrame) -> str | None:
    """Why the comparison of a (model, task)'s paired cells ``grp`` cannot be made, or None when
    every cell has a reply: "not measurable: every call failed (N of N)" when every generation
    failed, else the first wrapper whose every call failed, else no item × seed answered under
    every wrapper."""
    empty = grp[grp["n"] == 0]
    if empty.empty:
        return None
    n_errors = int(grp["n_call_errors"].sum())
    total = int((grp["n"] + grp["n_call_errors"] + grp["n_unpaired"]).sum())
    if n_errors == total:
        return every_call_failed(total)
    dead = empty[empty["n_unpaired"] == 0]
    if len(dead):
        w = dead.assign(_k=dead["wrapper"].map(_wrapper_key)).sort_values("_k").iloc[0]
        return f"not measurable: every call of wrapper {w['wrapper']!r} failed ({w['n_call_errors']} of {w['n_call_errors']})"
    return empty["not_measurable"].iloc[0]


def _cell_not_measurable(n: int, n_errors: int, n_unpaired: int, n_parseable: int, total: int) -> str | None:
    """Why a cell's null metrics are null: every call failed; every reply left out of a paired
    comparison; or (Acc | parse only) no reply parsed."""
    if n == 0 and n_errors == total:
        return every_call_failed(total)
    if n == 0:
        return (
            f"not measurable: no item x seed answered under every wrapper ({n_errors} of {total} calls failed, "
            f"{n_unpaired} replies left out with their failed pair)"
        )
    if n_parseable == 0:
        return no_reply_parsed(n)
    return None


def cell_metrics(scored: pd.DataFrame, mode: str = DEFAULT_MODE, paired: bool = False) -> pd.DataFrame:
    """Per (model, task, wrapper) cell: A, P, Acc | parseable and the truncation rate (§4).

    Over the replies of the cell (all items × seeds) in extraction mode ``mode``; a call that
    failed at the provider is no reply (counted in ``n_call_errors`` only). With ``paired`` (the
    cells FSI / PSI compare), an item × seed whose call failed under any wrapper of the (model,
    task) is left out of every wrapper's cell (``n_unpaired``). A cell with no reply left has
    null A, P, C and truncation rate and says why in ``not_measurable`` ("not measurable: every
    call failed (N of N)"); a cell with no parseable reply has a null C and "not measurable: no
    reply parsed (N of N unparseable)".

    * ``accuracy_pct`` A = 100 · #correct / n (an unparseable generation is incorrect);
    * ``parseability_pct`` P = 100 · #parseable / n;
    * ``acc_given_parse_pct`` C = 100 · #correct / #parseable — null when nothing is
      parseable; A = P · C / 100 exactly (review major 1: this is the Acc | parse table by
      model / wrapper / task);
    * ``truncation_rate_pct`` = 100 · #(finish_reason == "length") / n; a null
      finish_reason counts as *not* truncated (the review's 24-token concern, mainly for
      ``deliberate``);
    * ``chance_pct`` = mean over the cell's generations of the chance accuracy
      (100/n_choices, 50, 0); null when a choice generation lacks ``n_choices``.

    Returns:
        :class:`~metamorph.studies.wrapper_sensitivity.schemas.WrapperCells`: ``model_id, task,
        answer_type, wrapper, mode, accuracy_pct, parseability_pct, acc_given_parse_pct,
        truncation_rate_pct, chance_pct, n, n_correct, n_parseable, n_truncated, n_items,
        n_seeds, n_call_errors, n_unpaired, not_measurable``.
    """
    s = validate_scored(scored, mode)
    return WrapperCells.validate(_sort(cell_rows(s, mode, paired), CELL_KEYS))


def cell_metrics_by_mode(scored: pd.DataFrame) -> pd.DataFrame:
    """:func:`cell_metrics` in every extraction mode present in ``scored``, stacked (modes in
    sorted order): the ``wrapper_cells`` table (§4), one row per model × task × wrapper × mode.

    Raises:
        ValueError: as :func:`validate_scored` (for each mode).

    Returns:
        :class:`~metamorph.studies.wrapper_sensitivity.schemas.WrapperCells` rows of every mode.
    """
    require_columns(scored, ["mode"], "scored")
    return pd.concat([cell_metrics(scored, m) for m in sorted(scored["mode"].unique())], ignore_index=True)


def validate_cells(cells: pd.DataFrame, columns: Sequence[str], what: str) -> pd.DataFrame:
    """A copy of ``cells`` with string ids, after checking it has the cell key and ``columns``.

    Raises:
        ValueError: a missing column, a null id, or several rows for one (model_id, task,
            wrapper) cell (cells of several extraction modes); the message starts with ``what``.
    """
    require_columns(cells, list(CELL_KEYS) + list(columns), what)
    c = cells.copy()
    for col in CELL_KEYS:
        if c[col].isna().any():
            raise ValueError(f"{what}: column '{col}' has null value(s)")
        c[col] = c[col].astype(str)
    dup = c.duplicated(CELL_KEYS, keep=False)
    if dup.any():
        first = c.loc[dup, CELL_KEYS].iloc[0].to_dict()
        raise ValueError(
            f"{what}: several rows for one (model_id, task, wrapper) cell, e.g. {first} "
            "(pass the cells of a single extraction mode)"
        )
    return c


def tied_wrappers(grp: pd.DataFrame, col: str = "accuracy_pct") -> tuple[list[str], list[str]]:
    """The wrappers tied at the highest and at the lowest ``col`` (within :data:`TIE_TOL`) of one
    (model, task), each list in canonical order."""
    g = grp.assign(_wk=grp["wrapper"].map(_wrapper_key)).sort_values("_wk", kind="mergesort")
    v = g[col].astype(float)
    return g.loc[v >= v.max() - TIE_TOL, "wrapper"].tolist(), g.loc[v <= v.min() + TIE_TOL, "wrapper"].tolist()


def best_worst(grp: pd.DataFrame, col: str = "accuracy_pct") -> tuple[pd.Series, pd.Series]:
    """Rows of one best and one worst wrapper of a (model, task): among tied ones the first in
    canonical order (callers that show the result say so when there is a tie)."""
    best, worst = tied_wrappers(grp, col)
    by = grp.set_index("wrapper", drop=False)
    return by.loc[best[0]], by.loc[worst[0]]


def fsi_psi(cells: pd.DataFrame, eps: float = NFSI_EPS) -> pd.DataFrame:
    """FSI, PSI, nFSI and the bounded chance-adjusted nFSI per (model, task) (§4; review minor 2).

    Over the wrappers w of a (model, task), with A_w, P_w the cell accuracy and
    parseability in percent (:func:`cell_metrics`):

    * ``fsi`` FSI = max_w A_w − min_w A_w and ``psi`` PSI = max_w P_w − min_w P_w as fractions
      in [0, 1] (accuracies as fractions, as the paper reports them: paper Eq. 2–3, "mean FSI
      0.763"); ``fsi_pp`` / ``psi_pp`` the same in percentage points (= 100 × fraction).
    * ``nfsi`` = FSI / (Ā + ε), Ā the unweighted mean of A_w over the wrappers, ε = 1e-6
      (paper §4). Unitless; the ratio is the same whether A is in percent or a fraction
      (ε is negligible except at Ā = 0, where FSI = 0 too and nFSI = 0). nFSI is unbounded
      above (at most k, the number of wrappers, when one wrapper is right and the others
      score 0), ignores chance and explodes for models near 0 — the review's minor 2.
    * ``nfsi_chance`` — the bounded chance-adjusted variant. With c the task's chance
      accuracy (percent; n-weighted mean of the cells' ``chance_pct``):

          κ⁺_w = clip((A_w − c) / (100 − c), 0, 1),     nFSI_chance = max_w κ⁺_w − min_w κ⁺_w.

      κ = (A − c)/(100 − c) is the share of the above-chance headroom a wrapper attains
      (Cohen's-κ form; c = 0 for numeric, so κ = A/100); flooring it at 0 treats a
      below-chance wrapper (typically unparseable output scored as wrong) as "no skill",
      the normalisation of e.g. the Open LLM Leaderboard v2. The index is then *bounded in
      [0, 1] by construction* (no division by the mean accuracy, so no blow-up near 0 and
      no dependence on k), comparable across boolean (c = 50), k-way choice (c = 100/k)
      and numeric (c = 0) tasks, and 1 only when one wrapper is perfect and another is at
      or below chance. When every wrapper is at or above chance it equals
      FSI / (100 − c), the range of chance-adjusted accuracies; when the worst wrapper is
      below chance it is (A_max − c)/(100 − c) (clipped) instead of exceeding 1.
      ``n_below_chance`` counts the floored wrappers.
    * ``best_wrapper`` / ``worst_wrapper``: the wrapper(s) with the highest / lowest accuracy;
      wrappers tied within :data:`TIE_TOL` pp are **all** listed, joined by ``", "`` in
      :data:`WRAPPER_ORDER` (``"plain, json"``); ``n_best`` / ``n_worst`` count them.
      ``all_tied`` is True when every wrapper has the same accuracy (FSI = 0; then best and
      worst both list every wrapper) — a table where "best = worst" says the wrappers tie, not
      that one wrapper is both.

    A (model, task) with a single wrapper has null indices and best/worst and a note; an
    unknown chance level gives a null ``nfsi_chance`` and a note.

    Call errors: pass the *paired* cells (``cell_metrics(..., paired=True)``), so every wrapper
    is measured on the same item × seeds. ``n_call_errors`` sums the cells' call errors and
    ``n_generations`` every generation of the cells (call errors and unpaired replies
    included). A (model, task) where a wrapper's cell has no reply left has null indices,
    means and best/worst, with the cell's ``not_measurable`` text ("not measurable: every call
    failed (N of N)" with N = ``n_generations`` when every call failed).

    Returns:
        :class:`~metamorph.studies.wrapper_sensitivity.schemas.WrapperFSI`: ``model_id, task,
        n_wrappers, fsi, psi, fsi_pp, psi_pp, mean_accuracy_pct, nfsi, chance_pct, nfsi_chance,
        n_below_chance, best_wrapper, worst_wrapper, n_best, n_worst, all_tied,
        best_accuracy_pct, worst_accuracy_pct, note, n_call_errors, n_generations, not_measurable``.
    """
    c = validate_cells(
        cells,
        ["accuracy_pct", "parseability_pct", "chance_pct", "n", "n_call_errors", "n_unpaired", "not_measurable"],
        "cells",
    )
    rows = []
    for (m, t), grp in c.groupby(COMBINATION_KEYS, sort=True):
        k = len(grp)
        n_errors = int(grp["n_call_errors"].sum())
        n_generations = int((grp["n"] + grp["n_call_errors"] + grp["n_unpaired"]).sum())
        empty = grp[grp["n"] == 0]
        if len(empty):
            rows.append(
                dict(
                    model_id=m,
                    task=t,
                    n_wrappers=k,
                    n_below_chance=0,
                    n_call_errors=n_errors,
                    n_generations=n_generations,
                    not_measurable=combination_not_measurable(grp),
                    note=None,
                )
            )
            continue
        acc = grp["accuracy_pct"].astype(float).to_numpy()
        par = grp["parseability_pct"].astype(float).to_numpy()
        ch = grp["chance_pct"].astype(float).to_numpy()
        w = grp["n"].astype(float).to_numpy()
        mean_acc = float(acc.mean())
        chance = math.nan if np.isnan(ch).any() else float(np.average(ch, weights=w))
        notes = []
        row = dict(
            model_id=m,
            task=t,
            n_wrappers=k,
            mean_accuracy_pct=mean_acc,
            chance_pct=chance,
            fsi=math.nan,
            psi=math.nan,
            fsi_pp=math.nan,
            psi_pp=math.nan,
            nfsi=math.nan,
            nfsi_chance=math.nan,
            n_below_chance=int(0 if math.isnan(chance) else (acc < chance - TIE_TOL).sum()),
            best_wrapper=None,
            worst_wrapper=None,
            n_best=None,
            n_worst=None,
            all_tied=None,
            best_accuracy_pct=math.nan,
            worst_accuracy_pct=math.nan,
        )
        if k < 2:
            notes.append(f"1 wrapper ({grp['wrapper'].iloc[0]}): no pair, indices undefined")
        else:
            fsi = float(acc.max() - acc.min())
            psi = float(par.max() - par.min())
            best, worst = tied_wrappers(grp)
            row.update(
                fsi=fsi / 100.0,
                psi=psi / 100.0,
                fsi_pp=fsi,
                psi_pp=psi,
                nfsi=fsi / (mean_acc + eps),
                best_wrapper=", ".join(best),
                worst_wrapper=", ".join(worst),
                n_best=len(best),
                n_worst=len(worst),
                all_tied=len(best) == k,
                best_accuracy_pct=float(acc.max()),
                worst_accuracy_pct=float(acc.min()),
            )
            if math.isnan(chance):
                notes.append("chance level unknown (a choice item lacks n_choices): nfsi_chance undefined")
            else:
                kappa = np.clip((acc - chance) / (100.0 - chance), 0.0, 1.0)
                row["nfsi_chance"] = float(kappa.max() - kappa.min())
        row["note"] = "; ".join(notes) or None
        row.update(n_call_errors=n_errors, n_generations=n_generations, not_measurable=None)
        rows.append(row)
    cols = [
        "model_id",
        "task",
        "n_wrappers",
        "fsi",
        "psi",
        "fsi_pp",
        "psi_pp",
        "mean_accuracy_pct",
        "nfsi",
        "chance_pct",
        "nfsi_chance",
        "n_below_chance",
        "best_wrapper",
        "worst_wrapper",
        "n_best",
        "n_worst",
        "all_tied",
        "best_accuracy_pct",
        "worst_accuracy_pct",
        "note",
        "n_call_errors",
        "n_generations",
        "not_measurable",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for col in (
        "fsi",
        "psi",
        "fsi_pp",
        "psi_pp",
        "mean_accuracy_pct",
        "nfsi",
        "chance_pct",
        "nfsi_chance",
        "best_accuracy_pct",
        "worst_accuracy_pct",
    ):
        out[col] = out[col].astype(float)
    for col in ("n_best", "n_worst"):
        out[col] = out[col].astype("Int64")
    out["all_tied"] = out["all_tied"].astype("boolean")
    return WrapperFSI.validate(out)


def mean_indices(fsi: pd.DataFrame, n_resamples: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """Mean FSI / PSI / nFSI / nFSI_chance per model with percentile bootstrap 95% CIs over tasks.

    FSI and PSI appear twice: in percentage points (``FSI``, ``PSI``) and as fractions like the
    paper (``FSI_fraction``, ``PSI_fraction``, = pp / 100; the paper's "mean FSI 0.763").

    The unit resampled is the task (with replacement, ``n_resamples`` resamples,
    :func:`metamorph.stats.bootstrap_mean_ci`, percentile, ``numpy.random.default_rng(seed)``).
    Every (model, index) uses the same seed, so for a given model the four indices are
    resampled with the same task draws whenever they have the same tasks (a joint
    bootstrap) and every result is reproducible. Tasks with a null index (single wrapper,
    unknown chance) are left out and counted in ``n_undefined``.

    Boundary cases (never a silent NaN): no task -> null mean, no interval; one task -> the
    value, no interval (``n=1`` note); all tasks equal to v -> interval [v, v] with the
    "all values equal" note.

    Returns:
        :class:`~metamorph.studies.wrapper_sensitivity.schemas.WrapperMeanIndices`: ``model_id, index,
        unit, mean, ci_low, ci_high, n_tasks, n_undefined, n_resamples, seed, ci_note, n_call_errors,
        not_measurable`` (``n_call_errors`` sums the tasks' call errors; a model whose every call
        failed has a null mean and "not measurable: every call failed (N of N)")
        (one row per model × index, indices in the order FSI, PSI, nFSI, nFSI_chance,
        FSI_fraction, PSI_fraction).
    """
    require_columns(fsi, ["model_id", "task", "n_call_errors", "n_generations"] + [col for _, col, _ in INDICES], "fsi")
    rows = []
    for m, grp in fsi.groupby("model_id", sort=True):
        n_errors, n_generations = int(grp["n_call_errors"].sum()), int(grp["n_generations"].sum())
        for name, col, unit in INDICES:
            vals = pd.to_numeric(grp[col], errors="coerce")
            ci = stats.bootstrap_mean_ci(vals.dropna().to_numpy(dtype=float), n_resamples=n_resamples, seed=seed)
            rows.append(
                dict(
                    model_id=str(m),
                    index=name,
                    unit=unit,
                    mean=ci.mean,
                    ci_low=ci.low,
                    ci_high=ci.high,
                    n_tasks=ci.n,
                    n_undefined=int(vals.isna().sum()),
                    n_resamples=n_resamples,
                    seed=seed,
                    ci_note=ci.note,
                    n_call_errors=n_errors,
                    not_measurable=every_call_failed(n_generations)
                    if ci.n == 0 and n_generations and n_errors == n_generations
                    else None,
                )
            )
    cols = [
        "model_id",
        "index",
        "unit",
        "mean",
        "ci_low",
        "ci_high",
        "n_tasks",
        "n_undefined",
        "n_resamples",
        "seed",
        "ci_note",
        "n_call_errors",
        "not_measurable",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for col in ("mean", "ci_low", "ci_high"):
        out[col] = out[col].astype(float)
    return WrapperMeanIndices.validate(out)
