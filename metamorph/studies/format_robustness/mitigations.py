"""Mitigations of the document-format study (paper §5.5, Table 3), each measured by ΔM1, ΔM2
and ΔM3 (before − after, percentage points).

* :func:`vote_aggregation` — "Vot.": the k repeats of an (instance, format) are reduced to
  their majority (documented tie rule, :func:`_majority`).
* :func:`routing_choice` + :func:`format_routing` — "Rte.": every input is converted to the
  workflow's empirically best format and re-run through the workflow (new generations,
  planned by :func:`metamorph.studies.format_robustness.plan.plan_routing`); the best format
  is learnt from all instances (the paper's offline results) or from a calibration split.
* :func:`format_routing_simulated` — the earlier offline estimate (MR1 only, no new calls).
* :func:`mitigation_table` — Table 3 with its Avg. rows and columns.

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

from metamorph.studies.format_robustness.schemas import (
    FormatRouting,
    FormatRoutingSimulated,
    MitigationTable,
    ModelRoutingChoice,
    RoutingChoice,
    VoteAggregation,
)
from metamorph.studies.format_robustness.analysis import with_avg
from metamorph.studies.format_robustness.metrics import (
    BOTTOM,
    INSTANCE_KEYS,
    WORKFLOW_KEYS,
    accuracy_rows,
    instance_stability,
    mr_flags,
    ordered_formats,
    pct_or_nan,
    not_measurable_reason,
    repeats_not_measurable,
    shared_repeat_workflows,
    stability_rows,
    validate_generations,
)
from metamorph.studies.format_robustness.vocab import BASELINE_FORMAT, RELATIONS, ROUTING_SELECTIONS

__all__ = [
    "ROUTING_DETERMINISTIC_NOTE",
    "VOTE_TIES",
    "calibration_split",
    "format_routing",
    "format_routing_simulated",
    "mitigation_table",
    "routing_choice_per_model",
    "pooled_routing_choice",
    "routed_instance_ids",
    "routing_choice",
    "vote_aggregation",
]

#: Tie rules of the majority vote (:func:`vote_aggregation`).
VOTE_TIES = ("first", "bottom")


def _majority(decisions: Sequence[str], tie: str = "first") -> tuple[str, bool]:
    """Majority decision of the k repeats in repeat order (⊥ counts as a value).

    Returns ``(decision, tied)``. A tie for the top count is resolved by ``tie``:
    ``"first"`` — the tied decision that occurs first in repeat order (r = 1, 2, ...), i.e.
    what ``collections.Counter(decisions).most_common(1)`` returns, the usual self-consistency
    implementation; ``"bottom"`` — ⊥ "no majority" (the earlier rule, which compares equal
    to an unparseable ⊥ in another format).
    """
    counts = Counter(decisions).most_common()  # equal counts keep first-occurrence order
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return (counts[0][0] if tie == "first" else BOTTOM), True
    return counts[0][0], False


def _rates(flags: pd.DataFrame) -> dict[tuple[str, str, str], tuple[float, int]]:
    """(workflow, dataset, relation) -> (violation % over defined units, n units)."""
    out = {}
    for (wf, ds), grp in flags.groupby(WORKFLOW_KEYS, sort=True):
        for rel in RELATIONS:
            col = grp[rel.lower()].dropna()
            out[(wf, ds, rel)] = (pct_or_nan(int(col.astype(bool).sum()), len(col)), int(len(col)))
    return out


def vote_aggregation(gen: pd.DataFrame, tie: str = "first") -> pd.DataFrame:
    """Mitigation 1 (§5.5, Table 3 "Vot."): majority vote over the k repeats; ΔM1, ΔM2, ΔM3.

    For each (instance, format) the k decisions are reduced to their majority (⊥ counts as a
    value; ties by ``tie``, see :func:`_majority`; default: the tied decision seen first).
    The voted workflow answers once per (instance, format), so after voting the unit is the
    instance:

    * **M1 after** = % of instances whose voted decisions differ between two formats;
    * **M2 after** = M2 before: voting changes no evidence ("Δ𝑀2 remains 0.00% across all
      voting configurations because voting operates within a single format", §5.5);
    * **M3 after** = 0: one voted decision per format is trivially consistent (Table 3's
      ΔM3 of voting equals Table 1's M3 in every cell, e.g. MedQA OpenAI 71.37).

    *Before* is :func:`~metamorph.studies.format_robustness.metrics.mr_flags` (groups). Δ =
    before − after in percentage points (> 0 = fewer violations). Instances with < 2 formats
    are left out of both sides (no relation); an instance with a failed call is left out of the
    vote (its k replies are not all known) and *before* leaves out its failed groups. When the k repeats are one computation
    (deterministic decoding, :func:`~metamorph.studies.format_robustness.metrics.shared_repeat_workflows`)
    or there is one repeat (k = 1), the vote is the one reply, so after and Δ are null with
    ``not_measurable`` saying why (:func:`~metamorph.studies.format_robustness.metrics.repeats_not_measurable`).

    Raises:
        ValueError: invalid generations frame, unknown ``tie``.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.VoteAggregation`: ``workflow_id,
        dataset, relation, before_pct, after_pct, delta_pp, n_before, n_after, n_ties, not_measurable``.
    """
    if tie not in VOTE_TIES:
        raise ValueError(f"vote_aggregation: tie must be one of {VOTE_TIES}, got {tie!r}")
    g = validate_generations(gen)
    before = _rates(mr_flags(gen))
    not_measurable = repeats_not_measurable(g)
    series = g.groupby(WORKFLOW_KEYS, sort=True)["_err"].agg(["size", "sum"])
    failed = g.loc[g["_err"], INSTANCE_KEYS].drop_duplicates().assign(_failed=True)
    g = g.merge(failed, on=INSTANCE_KEYS, how="left")
    g = g[g["_failed"].isna()].sort_values(INSTANCE_KEYS + ["format", "repeat"])
    votes = {key: _majority(s.tolist(), tie) for key, s in g.groupby(INSTANCE_KEYS + ["format"], sort=True)["_dec"]}
    cells = pd.DataFrame(
        [(*key, vote, t) for key, (vote, t) in votes.items()], columns=INSTANCE_KEYS + ["format", "_vote", "_tie"]
    )
    inst = (
        cells.groupby(INSTANCE_KEYS, sort=True)
        .agg(_nf=("_vote", "size"), _nv=("_vote", "nunique"), _ties=("_tie", "sum"))
        .reset_index()
    )
    rows = []
    for (wf, ds), (n_calls, n_failed) in series.iterrows():
        grp = inst[(inst["workflow_id"] == wf) & (inst["dataset"] == ds)]
        d = grp[grp["_nf"] >= 2]
        m1_after = pct_or_nan(int((d["_nv"] > 1).sum()), len(d))
        after = {"MR1": m1_after, "MR2": before[(wf, ds, "MR2")][0], "MR3": 0.0 if len(d) else math.nan}
        note = not_measurable.get((wf, ds))
        if note is None and len(d) == 0 and n_failed:
            note = not_measurable_reason(int(n_calls), int(n_failed)) or (
                f"not measurable: every instance has a failed call ({int(n_failed)} of {int(n_calls)} calls failed)"
            )
        for rel in RELATIONS:
            b, n_b = before[(wf, ds, rel)]
            a = math.nan if note else after[rel]
            rows.append(
                dict(
                    workflow_id=wf,
                    dataset=ds,
                    relation=rel,
                    before_pct=b,
                    after_pct=a,
                    delta_pp=b - a,
                    n_before=n_b,
                    n_after=len(d),
                    n_ties=int(grp["_ties"].sum()),
                    not_measurable=note,
                )
            )
    cols = [
        "workflow_id",
        "dataset",
        "relation",
        "before_pct",
        "after_pct",
        "delta_pp",
        "n_before",
        "n_after",
        "n_ties",
        "not_measurable",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for c in ("before_pct", "after_pct", "delta_pp"):
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


def format_routing_simulated(gen: pd.DataFrame, calibration_fraction: float = 0.3, seed: int = 0) -> pd.DataFrame:
    """Routing *simulated* from the study's own generations, without new calls (the earlier
    reading, kept as an option; the paper re-runs the routed inputs: :func:`format_routing`).

    Only MR1 is estimated, on the held-out split.

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
        :class:`~metamorph.studies.format_robustness.schemas.FormatRoutingSimulated`: ``workflow_id,
        dataset, best_format, criterion, calibration_score_pct, mrv_before_pct,
        mrv_after_pct, delta_mrv_pp, n_calibration, n_heldout, note``.
    """
    g = validate_generations(gen)
    split = calibration_split(g["instance_id"].unique(), calibration_fraction, seed)
    g["_calib"] = g["instance_id"].map(split).astype(bool)
    flags = mr_flags(gen, unit="instance_repeat1").set_index(INSTANCE_KEYS)
    cell_stable = instance_stability(g).set_index(INSTANCE_KEYS + ["format"])["stable"].astype(bool)
    rows = []
    for (wf, ds), grp in g.groupby(WORKFLOW_KEYS, sort=True):
        fmts = ordered_formats(grp["format"])
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
                table = accuracy_rows(cal).set_index("format")["accuracy_pct"]
            else:
                criterion = "stability"
                table = stability_rows(cal).set_index("format")["stability_pct"]
            top = table.max()
            candidates = [f for f in fmts if f in table.index and table[f] >= top - 1e-9]
            best, score = candidates[0], float(table[candidates[0]])
        held_ids = sorted(held["instance_id"].unique())
        fl = flags.loc[[(wf, ds, i) for i in held_ids]] if held_ids else flags.iloc[0:0]
        fl = fl.dropna(subset=["mr1"])
        before = pct_or_nan(int(fl["mr1"].astype(bool).sum()), len(fl))
        routed = [i for i in held_ids if (wf, ds, i, best) in cell_stable.index]
        if len(routed) < len(held_ids):
            notes.append(f"{len(held_ids) - len(routed)} held-out instance(s) lack {best!r}: left out of mrv_after_pct")
        unstable = sum(not bool(cell_stable.loc[(wf, ds, i, best)]) for i in routed)
        after = pct_or_nan(unstable, len(routed))
        rows.append(
            dict(
                workflow_id=wf,
                dataset=ds,
                best_format=best,
                criterion=criterion,
                calibration_score_pct=score,
                mrv_before_pct=before,
                mrv_after_pct=after,
                delta_mrv_pp=before - after,
                n_calibration=int(cal["instance_id"].nunique()),
                n_heldout=len(held_ids),
                note="; ".join(notes) or None,
            )
        )
    cols = [
        "workflow_id",
        "dataset",
        "best_format",
        "criterion",
        "calibration_score_pct",
        "mrv_before_pct",
        "mrv_after_pct",
        "delta_mrv_pp",
        "n_calibration",
        "n_heldout",
        "note",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for c in cols[4:8]:
        out[c] = out[c].astype(float)
    return FormatRoutingSimulated.validate(out)


def _best(table: pd.Series, fmts: list[str]) -> tuple[str, float] | None:
    """The format with the highest score (ties in ``fmts`` order); None when no score is measurable."""
    table = table.dropna()
    if table.empty:
        return None
    top = table.max()
    candidates = [f for f in fmts if f in table.index and table[f] >= top - 1e-9]
    return candidates[0], float(table[candidates[0]])


def routing_choice(
    gen: pd.DataFrame, selection: str = "all", calibration_fraction: float = 0.3, seed: int = 0
) -> pd.DataFrame:
    """The empirically best format of every workflow × dataset (§5.5 format routing).

    "This layer maps the input task domain to the optimal format for the current workflow
    based on offline empirical results": per workflow × dataset the format with the highest
    accuracy Acc_f (all generations with gold, ⊥ incorrect) when the dataset has gold, else
    the highest stability Stb_f (``criterion``). Ties (within 1e-9 pp) go to the
    baseline-first order txt, md, json, csv, then alphabetical.

    ``selection="all"`` (default, the paper: the offline results are the study's own) learns
    from every instance; ``selection="calibration"`` learns from the calibration split of
    :func:`calibration_split` only (``calibration_fraction``, ``seed``), so that the routed
    metric can be measured on held-out instances; with no calibration instance the baseline
    is used (``criterion = "default"``), as it is when no format has a measurable score (every
    call failed).

    Raises:
        ValueError: invalid generations frame, unknown ``selection``, fraction outside [0, 1].

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.RoutingChoice`: ``workflow_id,
        dataset, best_format, criterion, score_pct (%), n_instances, selection,
        calibration_fraction, split_seed`` (the last two null with ``selection="all"``).
    """
    if selection not in ROUTING_SELECTIONS:
        raise ValueError(f"routing_choice: selection must be one of {ROUTING_SELECTIONS}, got {selection!r}")
    if not 0.0 <= calibration_fraction <= 1.0:
        raise ValueError(f"routing_choice: calibration_fraction must be in [0, 1], got {calibration_fraction}")
    g = validate_generations(gen)
    if selection == "calibration":
        split = calibration_split(g["instance_id"].unique(), calibration_fraction, seed)
        g = g[g["instance_id"].map(split).astype(bool)]
    rows = []
    full = validate_generations(gen)
    for (wf, ds), grp_all in full.groupby(WORKFLOW_KEYS, sort=True):
        fmts = ordered_formats(grp_all["format"])
        grp = g[(g["workflow_id"] == wf) & (g["dataset"] == ds)]
        if len(grp) == 0:
            best = BASELINE_FORMAT if BASELINE_FORMAT in fmts else fmts[0]
            criterion, score = "default", math.nan
        else:
            if grp["gold"].notna().any():
                criterion, scores = "accuracy", accuracy_rows(grp).set_index("format")["accuracy_pct"]
            else:
                criterion, scores = "stability", stability_rows(grp).set_index("format")["stability_pct"]
            found = _best(scores, fmts)
            if found is None:  # every call failed: no format has a measurable score
                best = BASELINE_FORMAT if BASELINE_FORMAT in fmts else fmts[0]
                criterion, score = "default", math.nan
            else:
                best, score = found
        cal = selection == "calibration"
        rows.append(
            dict(
                workflow_id=wf,
                dataset=ds,
                best_format=best,
                criterion=criterion,
                score_pct=score,
                n_instances=int(grp["instance_id"].nunique()),
                selection=selection,
                calibration_fraction=calibration_fraction if cal else None,
                split_seed=seed if cal else None,
            )
        )
    cols = [
        "workflow_id",
        "dataset",
        "best_format",
        "criterion",
        "score_pct",
        "n_instances",
        "selection",
        "calibration_fraction",
        "split_seed",
    ]
    out = pd.DataFrame(rows, columns=cols)
    out["score_pct"] = out["score_pct"].astype(float)
    out["calibration_fraction"] = out["calibration_fraction"].astype(float)
    out["split_seed"] = out["split_seed"].astype("Int64")
    return RoutingChoice.validate(out)


def routing_choice_per_model(
    decisions: pd.DataFrame,
    evidence: pd.DataFrame,
    *,
    model_id: str,
    selection: str = "all",
    calibration_fraction: float = 0.3,
    seed: int = 0,
) -> pd.DataFrame:
    """:func:`routing_choice` of one model's generations (§5.5 "Rte."), from that model's own
    ``extracted_decisions`` and ``evidence_categories`` rows (their generation outcomes,
    :func:`~metamorph.studies.format_robustness.plan.generation_outcomes`).

    A workflow is one model's ingestion path (``workflow_id = <model_id>/<ingestion>``) and the
    calibration split depends only on (seed, instance id), so a workflow's choice reads only its
    own rows: the rows of this function for every model are those of :func:`routing_choice` over
    all the models' generations.

    Raises:
        ValueError: a row of another model than ``model_id``; those of :func:`routing_choice`.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.ModelRoutingChoice`: ``model_id`` and
        the columns of :func:`routing_choice` (no row when the model has no generation).
    """
    from metamorph.studies.format_robustness.plan import generation_outcomes, metric_input

    others = sorted(set(decisions["model_id"].astype(str)) - {model_id})
    if others:
        raise ValueError(f"routing_choice_per_model: rows of model(s) {others[:3]} in the generations of {model_id!r}")
    if len(decisions) == 0:
        empty = pd.DataFrame(columns=["model_id", *RoutingChoice.to_schema().columns])
        return ModelRoutingChoice.validate(empty)
    out = routing_choice(metric_input(generation_outcomes(decisions, evidence)), selection, calibration_fraction, seed)
    out.insert(0, "model_id", model_id)
    return ModelRoutingChoice.validate(out)


def pooled_routing_choice(choices: pd.DataFrame) -> pd.DataFrame:
    """Every model's routing choice (:func:`routing_choice_per_model` rows) in one table, one row per
    workflow × dataset sorted by them, as :func:`routing_choice` over all the models' generations
    returns it.

    Raises:
        ValueError: a workflow × dataset chosen twice.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.RoutingChoice`.
    """
    twice = choices[choices.duplicated(WORKFLOW_KEYS, keep=False)]
    if len(twice):
        first = twice.iloc[0]
        raise ValueError(
            f"routing_choice: workflow {first['workflow_id']!r}, dataset {first['dataset']!r} chosen twice"
        )
    out = choices.drop(columns=["model_id"]).sort_values(WORKFLOW_KEYS, kind="stable").reset_index(drop=True)
    return RoutingChoice.validate(out[list(RoutingChoice.to_schema().columns)])


#: What routing's after values are when decoding is deterministic (:func:`format_routing`).
ROUTING_DETERMINISTIC_NOTE = (
    "deterministic decoding: every routed input of an instance is one computation (the "
    "original call in the best format), so M1 and M2 after are 0 and M3 after is not "
    "measurable by construction"
)


def format_routing(gen: pd.DataFrame, routed: pd.DataFrame, choice: pd.DataFrame) -> pd.DataFrame:
    """Mitigation 2 (§5.5, Table 3 "Rte."): ΔM1, ΔM2, ΔM3 of format routing, measured on new
    generations of the routed inputs.

    ``routed`` is a generations frame (columns of
    :data:`~metamorph.studies.format_robustness.metrics.GENERATION_COLUMNS`) of the routed
    run: for every instance, *source* format f (the ``format`` column) and repeat r, the
    workflow's answer to the instance converted to the chosen format
    (:func:`metamorph.studies.format_robustness.plan.plan_routing`). M1/M2/M3 after routing
    are :func:`~metamorph.studies.format_robustness.metrics.mr_flags` of ``routed`` (groups),
    before are those of ``gen``; both over the instances in ``routed`` (all instances, or the
    held-out ones when the choice used a calibration split). Δ = before − after (pp). When the
    routed run's repeats are one computation (deterministic decoding: every routed input of an
    instance is the original call in the best format), M1/M2 after are 0 and M3 after null by
    construction, and ``note`` says so (:data:`ROUTING_DETERMINISTIC_NOTE`).

    Raises:
        ValueError: invalid frames; a routed workflow × dataset without a choice; a routed
            instance missing from ``gen``.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.FormatRouting`: ``workflow_id,
        dataset, relation, best_format, before_pct, after_pct, delta_pp, n_before, n_after,
        n_instances, selection, note``.
    """
    g = validate_generations(gen)
    r = validate_generations(routed)
    shared = shared_repeat_workflows(r)
    ch = choice.set_index(WORKFLOW_KEYS)
    rows = []
    for (wf, ds), grp in r.groupby(WORKFLOW_KEYS, sort=True):
        if (wf, ds) not in ch.index:
            raise ValueError(f"format_routing: no routing choice for workflow {wf!r}, dataset {ds!r}")
        ids = set(grp["instance_id"])
        orig = g[(g["workflow_id"] == wf) & (g["dataset"] == ds) & g["instance_id"].isin(ids)]
        missing = ids - set(orig["instance_id"])
        if missing:
            raise ValueError(
                f"format_routing: routed instance(s) {sorted(missing)[:3]} of {wf!r}/{ds!r} are not in gen"
            )
        before = _rates(mr_flags(orig.drop(columns=["_dec", "_cats", "_err"])))
        after = _rates(mr_flags(grp.drop(columns=["_dec", "_cats", "_err"])))
        for rel in RELATIONS:
            (b, n_b), (a, n_a) = before[(wf, ds, rel)], after[(wf, ds, rel)]
            rows.append(
                dict(
                    workflow_id=wf,
                    dataset=ds,
                    relation=rel,
                    best_format=ch.loc[(wf, ds), "best_format"],
                    before_pct=b,
                    after_pct=a,
                    delta_pp=b - a,
                    n_before=n_b,
                    n_after=n_a,
                    n_instances=len(ids),
                    selection=ch.loc[(wf, ds), "selection"],
                    note=ROUTING_DETERMINISTIC_NOTE if (wf, ds) in shared else None,
                )
            )
    cols = [
        "workflow_id",
        "dataset",
        "relation",
        "best_format",
        "before_pct",
        "after_pct",
        "delta_pp",
        "n_before",
        "n_after",
        "n_instances",
        "selection",
        "note",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for c in ("before_pct", "after_pct", "delta_pp"):
        out[c] = out[c].astype(float)
    return FormatRouting.validate(out)


def mitigation_table(vote: pd.DataFrame, routing: pd.DataFrame) -> pd.DataFrame:
    """Table 3: ΔM1/ΔM2/ΔM3 (pp) of voting ("Vot.") and routing ("Rte.") per dataset ×
    workflow, with the ``Avg.`` column (mean over workflows, per strategy) and ``Avg.`` rows
    (mean over datasets) — unweighted means of cells
    (:func:`~metamorph.studies.format_robustness.analysis.with_avg`). E.g. Table 3 Construct
    ΔM1 Vot. Avg. = (13.73 + 10.93 − 0.13 − 1.60)/4 = 5.73.

    Raises:
        ValueError: missing columns.

    Returns:
        :class:`~metamorph.studies.format_robustness.schemas.MitigationTable`: ``strategy,
        relation, dataset, workflow_id, delta_pp``.
    """
    parts = [
        vote[["workflow_id", "dataset", "relation", "delta_pp"]].assign(strategy="vote"),
        routing[["workflow_id", "dataset", "relation", "delta_pp"]].assign(strategy="routing"),
    ]
    cells = pd.concat(parts, ignore_index=True)
    out = with_avg(cells, "dataset", "workflow_id", "delta_pp", by=["strategy", "relation"])
    return MitigationTable.validate(out[["strategy", "relation", "dataset", "workflow_id", "delta_pp"]])


def routed_instance_ids(instance_ids: Iterable[str], choice: pd.DataFrame) -> list[str]:
    """The instances format routing re-runs: all of them with ``selection="all"``, the held-out
    ones (not in the calibration split recorded in ``choice``) with ``"calibration"``.

    Raises:
        ValueError: ``choice`` mixes selections or split parameters.
    """
    ids = [str(i) for i in instance_ids]
    sel = choice[["selection", "calibration_fraction", "split_seed"]].drop_duplicates()
    if len(sel) > 1:
        raise ValueError(f"routed_instance_ids: the routing choice mixes selections {sel.to_dict('records')}")
    if len(sel) == 0 or sel.iloc[0]["selection"] == "all":
        return ids
    split = calibration_split(ids, float(sel.iloc[0]["calibration_fraction"]), int(sel.iloc[0]["split_seed"]))
    return [i for i in ids if not split[i]]
