"""Fairness of the document-format study: format sensitivity Sen_f(g) and the format disparity
score FDS_f(g) (§5.1 'Fairness', §5.3, Figure 5).

Input: the generations frame of :mod:`metamorph.studies.format_robustness.metrics` and a long
sensitive-attribute frame (:data:`SENSITIVE_COLUMNS`); output validated by
:class:`~metamorph.studies.format_robustness.schemas.FairnessDisparity`.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from metamorph.schemas import require_columns
from metamorph.studies.format_robustness.metrics import (
    ordered_formats,
    sort_rows,
    unit_rows,
    validate_generations,
)
from metamorph.studies.format_robustness.schemas import FairnessDisparity

__all__ = ["SENSITIVE_COLUMNS", "FDS_DISPERSIONS", "fairness_disparity"]

#: Columns of the long sensitive-attribute frame.
SENSITIVE_COLUMNS = ("dataset", "instance_id", "attribute", "value")


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


#: Dispersions σ_g of the FDS normalisation (:func:`fairness_disparity`).
FDS_DISPERSIONS = ("mad", "std", "sample_std")


def _dispersion(values: np.ndarray, how: str) -> float:
    if how == "mad":
        return float(np.abs(values - values.mean()).mean())
    if how == "std":
        return float(values.std(ddof=0))
    return float(values.std(ddof=1)) if values.size > 1 else math.nan


def fairness_disparity(
    gen: pd.DataFrame, sensitive: pd.DataFrame, eps: float = 1e-9, dispersion: str = "mad", unit: str = "group"
) -> pd.DataFrame:
    """Format sensitivity Sen_f(g) and format disparity score FDS_f(g) (§5.1 'Fairness', §5.3,
    Figure 5).

    Sensitive factors g (per dataset, from the long frame ``dataset, instance_id,
    attribute, value``): every single attribute, and every pair of attributes (named
    ``"a:b"`` with a < b; its groups are the value combinations). An instance belongs to a
    group of g only if it has a value for every attribute of g.

    * Affirmative rate p_{f,g,v} of a group = % favourable among the group's *parseable*
      responses in format f over every group (instance, repeat) — the unit of §5.2, as in
      :func:`mr_flags` — so a changed decision in repeat 2 counts (``favorable`` not null; it is
      null exactly when unparseable, or when the dataset has no favourable label — then no group
      has a rate). ``unit="instance_repeat1"`` keeps the earlier reading (repeat-1 responses).
    * ``Sen_f(g)`` = max − min affirmative rate over the groups with ≥ 1 parseable
      generation, in percentage points; null when fewer than 2 such groups.
    * ``FDS_f(g) = (Sen_f(g) − μ_g) / (σ_g + ε)`` with μ_g the mean of Sen_f(g) over the
      formats of that workflow × dataset with a non-null Sen, and σ_g its dispersion:

      - ``dispersion="mad"`` (default): the **mean absolute deviation** about μ_g,
        σ_g = mean_f |Sen_f − μ_g|. §5.3 reports "FDS up to 2.00" for the pattern where CSV
        has a disparity and the other three formats "produce identical decision rates"
        (Sen = a, 0, 0, 0): MAD gives (3a/4)/(3a/8) = 2.00 exactly, and 2 = n/2 is the largest
        value it allows with 4 formats. The population sd cannot reach 2.00 (same pattern:
        √3 ≈ 1.73, its maximum with 4 formats), nor can the sample sd (1.50). The paper says
        "standard deviation"; MAD is the reading that reproduces its reported value.
      - ``"std"``: population standard deviation (ddof = 0), the earlier behaviour.
      - ``"sample_std"``: sample standard deviation (ddof = 1).

      Equal Sen in every format gives FDS = 0.

    Datasets without sensitive attributes give no rows. Counts per row: ``n_groups`` groups
    *of the factor* (its values) with a rate; ``n_responses`` parseable responses of f in them
    (one per (instance, repeat) group of §5.2), ``n_instances`` distinct instances among them,
    ``min_group_n`` responses in the smallest group of the factor.

    Raises:
        ValueError: invalid frames (named), an unknown ``dispersion`` or ``unit``.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.FairnessDisparity`: ``workflow_id,
        dataset, factor, format, sen_pp, fds, n_groups, min_group_n, n_responses, n_instances``.
    """
    if dispersion not in FDS_DISPERSIONS:
        raise ValueError(f"fairness_disparity: dispersion must be one of {FDS_DISPERSIONS}, got {dispersion!r}")
    g = validate_generations(gen)
    s = _validate_sensitive(sensitive)
    used = unit_rows(g[~g["_err"]], unit, "fairness_disparity")  # a failed call has no decision rate
    rows = []
    for ds, s_ds in s.groupby("dataset", sort=True):
        wide = s_ds.pivot(index="instance_id", columns="attribute", values="value")
        attrs = sorted(wide.columns)
        wide.columns = [f"_attr:{a}" for a in wide.columns]  # never collide with generation columns
        factors = [(a,) for a in attrs] + list(itertools.combinations(attrs, 2))
        for wf, grp_wf in used[used["dataset"] == ds].groupby("workflow_id", sort=True):
            fmts = ordered_formats(grp_wf["format"])
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
                    cells.append(
                        [
                            wf,
                            ds,
                            ":".join(factor),
                            f,
                            sen,
                            n_groups,
                            int(grp_stats["size"].min()) if n_groups else 0,
                            len(sub),
                            int(sub["instance_id"].nunique()),
                        ]
                    )
                sens = np.array([c[4] for c in cells], dtype=float)
                ok = ~np.isnan(sens)
                mu = float(sens[ok].mean()) if ok.any() else math.nan
                sigma = _dispersion(sens[ok], dispersion) if ok.any() else math.nan
                for c, sv in zip(cells, sens):
                    fds = math.nan if math.isnan(sv) else (sv - mu) / (sigma + eps)
                    rows.append(
                        dict(
                            workflow_id=c[0],
                            dataset=c[1],
                            factor=c[2],
                            format=c[3],
                            sen_pp=sv,
                            fds=fds,
                            n_groups=c[5],
                            min_group_n=c[6],
                            n_responses=c[7],
                            n_instances=c[8],
                        )
                    )
    cols = [
        "workflow_id",
        "dataset",
        "factor",
        "format",
        "sen_pp",
        "fds",
        "n_groups",
        "min_group_n",
        "n_responses",
        "n_instances",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for c in ("sen_pp", "fds"):
        out[c] = out[c].astype(float)
    return FairnessDisparity.validate(sort_rows(out, ["workflow_id", "dataset", "factor", "format"]))
