"""Mitigations of the document-format study (paper §5.5, Table 3): vote aggregation across
formats and format routing.

* :func:`vote_aggregation` — the decision of an instance is the majority over its formats.
* :func:`format_routing` — every instance is answered in the format that did best on a
  calibration split (:func:`calibration_split`).

Inputs are the generations frame of :mod:`metamorph.studies.format_robustness.metrics`
(:func:`~metamorph.studies.format_robustness.metrics.validate_generations`); outputs are
validated by :mod:`metamorph.studies.format_robustness.schemas`.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Sequence

import pandas as pd

from metamorph.studies.format_robustness.metrics import (
    _BOTTOM,
    _INST,
    _KEYS,
    BASELINE_FORMAT,
    _accuracy,
    _ordered_formats,
    _pct,
    _stability,
    mr_flags,
    validate_generations,
)
from metamorph.studies.format_robustness.schemas import FormatRouting, VoteAggregation


def _majority(decisions: Sequence[str]) -> tuple[str, bool]:
    """Majority decision (⊥ counts as a value); a tie for the top count -> (⊥, True)."""
    counts = Counter(decisions).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return _BOTTOM, True
    return counts[0][0], False


def vote_aggregation(gen: pd.DataFrame) -> pd.DataFrame:
    """Mitigation: majority vote over the k repeats (§5.5), measured by MR1.

    For each (instance, format) the k decisions are reduced to their majority (⊥ counts as
    a value, so a majority of ⊥ is ⊥). A tie for the top count has no majority and yields
    ⊥ ("no majority"), which compares as the same outcome as an unparseable ⊥. MR1 is then
    evaluated on these voted decisions (``mrv_after_pct``) and compared with MR1 on the
    repeat-1 decisions (``mrv_before_pct``); ``delta_mrv_pp = before − after`` (> 0 means
    voting reduced violations). With k = 1 the vote is the repeat-1 decision.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.VoteAggregation`: ``workflow_id,
        dataset, mrv_before_pct, mrv_after_pct, delta_mrv_pp, n_instances, n_no_majority``.
    """
    g = validate_generations(gen)
    flags = mr_flags(gen).set_index(_INST)
    votes = {key: _majority(s.tolist()) for key, s in g.groupby(_INST + ["format"], sort=True)["_dec"]}
    cells = pd.DataFrame(
        [(*key, vote, tie) for key, (vote, tie) in votes.items()], columns=_INST + ["format", "_vote", "_tie"]
    )
    inst = cells.groupby(_INST, sort=True).agg(_nf=("_vote", "size"), _nv=("_vote", "nunique"), _ties=("_tie", "sum"))
    inst["_after"] = inst["_nv"] > 1
    inst = inst.join(flags["mr1"])
    rows = []
    for (wf, ds), grp in inst.groupby(level=["workflow_id", "dataset"], sort=True):
        d = grp[grp["_nf"] >= 2]
        n = len(d)
        before = _pct(int(d["mr1"].astype(bool).sum()), n)
        after = _pct(int(d["_after"].sum()), n)
        rows.append(dict(workflow_id=wf, dataset=ds, mrv_before_pct=before, mrv_after_pct=after,
                         delta_mrv_pp=before - after, n_instances=n, n_no_majority=int(grp["_ties"].sum())))
    cols = ["workflow_id", "dataset", "mrv_before_pct", "mrv_after_pct", "delta_mrv_pp", "n_instances", "n_no_majority"]
    out = pd.DataFrame(rows, columns=cols)
    for c in cols[2:5]:
        out[c] = out[c].astype(float)
    return VoteAggregation.validate(out)


def calibration_split(instance_ids: Iterable[str], calibration_fraction: float = 0.3, seed: int = 0) -> dict[str, bool]:
    """Deterministic split: ``True`` = calibration, ``False`` = held-out.

    An instance is in calibration iff ``u < calibration_fraction`` where ``u`` is the first
    8 bytes of ``sha256(f"{seed}:{instance_id}")`` read as an integer / 2**64 (uniform in
    [0, 1)). Depends only on (seed, instance_id), so every workflow, dataset and run sees the
    same split; the realised fraction is only approximately ``calibration_fraction``.
    """
    if not 0.0 <= calibration_fraction <= 1.0:
        raise ValueError(f"calibration_fraction must be in [0, 1], got {calibration_fraction}")
    out = {}
    for iid in instance_ids:
        h = hashlib.sha256(f"{seed}:{iid}".encode("utf-8")).digest()
        out[str(iid)] = int.from_bytes(h[:8], "big") / 2.0**64 < calibration_fraction
    return out


def format_routing(gen: pd.DataFrame, calibration_fraction: float = 0.3, seed: int = 0) -> pd.DataFrame:
    """Mitigation: route every input to one format chosen on a calibration split (§5.5).

    1. Instances are split by :func:`calibration_split` (seeded hash of ``instance_id``).
    2. Per workflow × dataset, the best format on the calibration instances is the one with
       the highest accuracy (Acc_f over all calibration generations with gold) when the
       calibration split has gold, else the highest Stb_f (``criterion``). Ties (equal to
       1e-9 pp) go to the baseline-first order txt, md, json, csv (then alphabetical). With
       no calibration instance the baseline (txt, or the first format present) is used
       (``criterion = "default"``).
    3. Every held-out input is re-rendered to the best format, so all its format variants
       become the *same document*: cross-format disagreement can then only come from
       run-to-run variation. Hence the held-out MR1 after routing (``mrv_after_pct``) =
       % of held-out instances whose k repeats of the routed format disagree (¬S_f).
       ``mrv_before_pct`` = held-out MR1 across formats on repeat-1 decisions (instances
       with ≥ 2 formats). With k = 1, ``mrv_after_pct`` is 0 by construction.

    Held-out instances lacking the routed format are left out of ``mrv_after_pct`` and
    counted in ``note``.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.FormatRouting`: ``workflow_id,
        dataset, best_format, criterion, calibration_score_pct, mrv_before_pct,
        mrv_after_pct, delta_mrv_pp, n_calibration, n_heldout, note``.
    """
    g = validate_generations(gen)
    split = calibration_split(g["instance_id"].unique(), calibration_fraction, seed)
    g["_calib"] = g["instance_id"].map(split).astype(bool)
    flags = mr_flags(gen).set_index(_INST)
    cell_stable = g.groupby(_INST + ["format"], sort=False)["_dec"].nunique().eq(1)
    rows = []
    for (wf, ds), grp in g.groupby(_KEYS, sort=True):
        fmts = _ordered_formats(grp["format"])
        cal = grp[grp["_calib"]]
        held = grp[~grp["_calib"]]
        notes = []
        if len(cal) == 0:
            best = BASELINE_FORMAT if BASELINE_FORMAT in fmts else fmts[0]
            criterion, score = "default", math.nan
            notes.append("no calibration instance: baseline used")
        else:
            if cal["gold"].notna().any():
                criterion = "accuracy"
                table = _accuracy(cal).set_index("format")["accuracy_pct"]
            else:
                criterion = "stability"
                table = _stability(cal).set_index("format")["stability_pct"]
            top = table.max()
            candidates = [f for f in fmts if f in table.index and table[f] >= top - 1e-9]
            best, score = candidates[0], float(table[candidates[0]])
        held_ids = sorted(held["instance_id"].unique())
        fl = flags.loc[[(wf, ds, i) for i in held_ids]] if held_ids else flags.iloc[0:0]
        fl = fl.dropna(subset=["mr1"])
        before = _pct(int(fl["mr1"].astype(bool).sum()), len(fl))
        routed = [i for i in held_ids if (wf, ds, i, best) in cell_stable.index]
        if len(routed) < len(held_ids):
            notes.append(f"{len(held_ids) - len(routed)} held-out instance(s) lack {best!r}: left out of mrv_after_pct")
        unstable = sum(not bool(cell_stable.loc[(wf, ds, i, best)]) for i in routed)
        after = _pct(unstable, len(routed))
        rows.append(dict(workflow_id=wf, dataset=ds, best_format=best, criterion=criterion,
                         calibration_score_pct=score, mrv_before_pct=before, mrv_after_pct=after,
                         delta_mrv_pp=before - after, n_calibration=int(cal["instance_id"].nunique()),
                         n_heldout=len(held_ids), note="; ".join(notes) or None))
    cols = ["workflow_id", "dataset", "best_format", "criterion", "calibration_score_pct", "mrv_before_pct",
            "mrv_after_pct", "delta_mrv_pp", "n_calibration", "n_heldout", "note"]
    out = pd.DataFrame(rows, columns=cols)
    for c in cols[4:8]:
        out[c] = out[c].astype(float)
    return FormatRouting.validate(out)
