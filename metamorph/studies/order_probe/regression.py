"""Logistic regression of exact recovery (paper App. Table 21): per model × setting,
``correct ~ log_frequency + C(language) + C(structure)`` with statsmodels ``Logit`` on the
scored scrambled inputs, reference levels zh_cn and the most frequent structure.

Standard errors are cluster-robust by canonical expression (the 23 inputs of one item are not
independent — the same reason the recovery CIs resample items). A predictor is dropped, and the
``note`` says so, when it cannot be estimated: no frequency in the data (log_frequency), a single
language or structure level. When the outcome has no variation or the fit fails (perfect
separation, singular design), one row with null estimates and the reason is returned — never a
number that was not estimated. Call errors (reason ``call_error``) are not observations:
``n_call_errors`` counts them, and a model × setting with nothing but call errors is one null row
with ``not_measurable`` = "not measurable: every call failed (N of N)".
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from metamorph.measurability import every_call_failed, is_call_error
from metamorph.schemas import require_columns

__all__ = [
    "COLUMNS",
    "fit_logit",
    "recovery_logit",
]

COLUMNS = [
    "model_id",
    "setting",
    "term",
    "coef",
    "std_err",
    "p_value",
    "n_obs",
    "pseudo_r2",
    "note",
    "n_call_errors",
    "not_measurable",
]


def fit_logit(df: pd.DataFrame) -> tuple[pd.DataFrame, float | None, list[str]]:
    """Fit on rows with columns correct, frequency, language, structure, item_id.

    Returns ``(terms, pseudo_r2, notes)``; ``terms`` has term, coef, std_err, p_value. Raises
    ``ValueError`` with the reason when nothing can be estimated.
    """
    import statsmodels.formula.api as smf

    notes = []
    d = df.copy()
    d["y"] = d["correct"].astype(int)
    d["structure"] = d["structure"].fillna("unknown")
    terms = []
    if d["frequency"].notna().any():
        missing = int(d["frequency"].isna().sum())
        if missing:
            notes.append(f"{missing} input(s) without frequency left out")
            d = d[d["frequency"].notna()]
        d["log_frequency"] = np.log(d["frequency"].astype(float))
        terms.append("log_frequency")
    else:
        notes.append("log_frequency dropped: no frequency in the data")
    if d["language"].nunique() > 1:
        ref = "zh_cn" if "zh_cn" in set(d["language"]) else sorted(d["language"].unique())[0]
        terms.append(f"C(language, Treatment('{ref}'))")
    else:
        notes.append("language dropped: one level")
    if d["structure"].nunique() > 1:
        ref = d["structure"].value_counts().index[0]
        terms.append(f"C(structure, Treatment('{ref}'))")
    else:
        notes.append("structure dropped: one level")
    if d["y"].nunique() < 2:
        raise ValueError(f"no variation in exact recovery ({int(d['y'].sum())} of {len(d)} correct): not estimable")
    if not terms:
        raise ValueError("no predictor with more than one level")
    formula = "y ~ " + " + ".join(terms)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            groups = pd.factorize(d["item_id"])[0]
            res = smf.logit(formula, data=d).fit(disp=0, maxiter=200, cov_type="cluster", cov_kwds={"groups": groups})
        except Exception as exc:  # noqa: BLE001 — separation, singular matrix, convergence
            raise ValueError(f"Logit not estimable: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}") from None
    out = pd.DataFrame(
        {"term": res.params.index, "coef": res.params.values, "std_err": res.bse.values, "p_value": res.pvalues.values}
    )
    if not np.all(np.isfinite(out[["coef", "std_err", "p_value"]].to_numpy(dtype=float))):
        raise ValueError("Logit not estimable: non-finite estimates (separation)")
    return out, float(res.prsquared), notes


def recovery_logit(scored: pd.DataFrame) -> pd.DataFrame:
    """One block of term rows per model × setting (scrambled inputs), or one null row with the
    reason. Columns: :data:`COLUMNS` (:class:`~.schemas.RecoveryRegression`)."""
    require_columns(
        scored,
        ("model_id", "setting", "item_id", "language", "structure", "frequency", "correct", "input_kind", "reason"),
        "recovery_logit(scored)",
    )
    rows = []
    scr = scored[scored["input_kind"] == "scrambled"]
    for (m, setting), part in scr.groupby(["model_id", "setting"], sort=True):
        failed = is_call_error(part["reason"])
        n_errors, part = int(failed.sum()), part[~failed]
        try:
            if part.empty:
                raise ValueError(every_call_failed(n_errors))
            terms, r2, notes = fit_logit(part)
        except ValueError as exc:
            rows.append(
                {
                    "model_id": m,
                    "setting": setting,
                    "term": None,
                    "coef": None,
                    "std_err": None,
                    "p_value": None,
                    "n_obs": len(part),
                    "pseudo_r2": None,
                    "note": str(exc),
                    "n_call_errors": n_errors,
                    "not_measurable": str(exc) if part.empty else None,
                }
            )
            continue
        for t in terms.itertuples():
            rows.append(
                {
                    "model_id": m,
                    "setting": setting,
                    "term": t.term,
                    "coef": t.coef,
                    "std_err": t.std_err,
                    "p_value": t.p_value,
                    "n_obs": len(part),
                    "pseudo_r2": r2,
                    "note": "; ".join(notes) or None,
                    "n_call_errors": n_errors,
                    "not_measurable": None,
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)
