"""Model upgrades across studies (asset group ``model_upgrades``): the robustness report card.

The per-study upgrade verdicts are each study's ``model_comparison`` asset; this group holds what
spans studies. The card reads the studies' metric tables from the warehouse (a study that has not
been run is listed as missing, not an error), builds each study's headline rows with its
``report.card_rows`` and keeps earlier versions of every model as history
(:mod:`metamorph.report_card`). It also reads the studies' ``model_comparison`` verdicts: a
candidate that regressed on a blocking metric (the studies' ``no_blocking_regression`` checks)
heads the card and fails the card's own check, so it shows at the top of this group.
"""

import dagster as dg
import duckdb
import pandas as pd
from dagster_duckdb import DuckDBResource
from pydantic import Field

from assets import plots
from assets._common import INLINE_MD_CHARS, display_float, validated_output
from metamorph.export import js_length
from assets.evaluations import evaluated_fingerprint, planned_run
from assets.partitions import model_partitions
from metamorph.report_card import (
    build_card,
    card_markdown,
    detectable_markdown,
    regressions_markdown,
    trend_key,
    trend_series,
)
from metamorph.schemas import ReportCard
from metamorph.verdict import regression_check, regression_records, studies_to_run
from metamorph.models import WORKFLOW_PROVIDERS
from metamorph.study import studies
from resources import ModelRegistryResource
from resources.storage import last_run, left_out_metadata

GROUP = "model_upgrades"
PREFIX = [GROUP]
POOL = "duckdb"

#: study -> its report-card rows: the warehouse tables they are built from, the builder and the tables
#: it can do without (:class:`metamorph.study.Card`, :attr:`metamorph.study.Study.card`).
CARD_SOURCES = {name: study.card for name, study in studies().items()}
#: The card's description in the UI: what it reads, when it is built and how to rebuild it.
CARD_DESCRIPTION = (
    "One row per model × study × headline metric with 95% CIs, each model's version and the change since its "
    "previous version. Built at the end of every `metamorph run`; rebuild it with `model_upgrades_job` (or "
    "Materialize here) after runs launched in the UI — in a run of its own: not being downstream of the studies' "
    "tables, it is not ordered after them within one run. It reads, when present: "
    + "; ".join(f"{s}: {', '.join([*card.tables, 'model_comparison'])}" for s, card in CARD_SOURCES.items())
    + ". A study without its tables is listed under 'not in the card' — never an error or a warning."
)
CARD_RECORD_COLUMNS = ["model_id", "study", "metric", "slice", "unit", "value", "ci_low", "ci_high", "version"] + [
    "previous_version",
    "delta",
]


def card_records(rows: pd.DataFrame) -> list[dict]:
    """The card's rows ``rows`` (:data:`metamorph.report_card.CARD_COLUMNS`) as the JSON entry
    ``card (in full)`` shows them: :data:`CARD_RECORD_COLUMNS`, numbers rounded as the card shows
    them (one decimal: every card unit is % or pp; NaN as null), a registry fingerprint as its
    first 8 characters (a 64-hex run would not wrap in the metadata pane)."""

    def shown(k, v):
        if isinstance(v, float):
            return None if v != v else display_float(v, True)
        return v[:8] if k.endswith("version") and isinstance(v, str) and len(v) > 16 else v

    return [{k: shown(k, v) for k, v in r.items()} for r in rows[CARD_RECORD_COLUMNS].to_dict(orient="records")]


#: The card's check: fails when a study's verdicts hold a blocking regression.
CARD_CHECK = "no_candidate_regressed"


class ReportCardConfig(dg.Config):
    """Which suite of each study the card reads (``metamorph run <study> --suite <name>`` builds
    the card from the suite it ran)."""

    suites: dict[str, str] = Field(
        default={},
        description="study -> the suite whose warehouse tables (schema <suite>) and generation history the "
        "card reads for that study; a study not named: its default suite (named like the study).",
    )


def _read(con: duckdb.DuckDBPyConnection, schema: str, table: str) -> pd.DataFrame | None:
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?", [schema, table]
    ).fetchall()[0][0]
    return con.execute(f'SELECT * FROM "{schema}"."{table}"').df() if exists else None


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    kinds={"duckdb"},
    # No deps on the studies' tables: they are read from the warehouse when present, so a study that
    # was not run is listed as missing — not an upstream asset that blocks or warns at Materialize.
    description=CARD_DESCRIPTION,
    check_specs=[
        dg.AssetCheckSpec(
            CARD_CHECK,
            asset=dg.AssetKey([GROUP, "robustness_report_card"]),
            description="Fails (ERROR) when a candidate regressed on a blocking metric "
            "in any study's model_comparison (its no_blocking_regression "
            "check).",
        )
    ],
)
def robustness_report_card(
    context: dg.AssetExecutionContext,
    config: ReportCardConfig,
    warehouse: DuckDBResource,
    model_registry: ModelRegistryResource,
):
    """One row per model × study × headline metric with 95% CIs (M1/M2/M3 and accuracy; FSI, PSI,
    accuracy and parseability; OrderProbe recovery per setting; WorkflowPerturb: the model's mean
    score as LLM judge of the deterministic variants and the CI gate's firing rate on the model's
    own LLM perturbations per type), each model's version (the registry
    fingerprint its generations were made with) and the difference to the previous version of
    the model. The metadata opens with the candidates that regressed on a blocking metric, and
    plots every headline cell across the model's versions (``trend``; the current values are
    also float metadata, one key per cell, for Dagster's plots across materializations). Code:
    metamorph.report_card.build_card. Each study is read from the suite ``config.suites`` names
    (default: its default suite); ``dagster.Failure`` for a study that is not one. A model that is
    not in the registry (removed from it) has no current row — its earlier rows stay as history —
    and is named in ``left_out`` / ``left_out_models`` with its last run."""
    unknown = sorted(set(config.suites) - set(CARD_SOURCES))
    if unknown:
        raise dg.Failure(f"config suites: no study {unknown}; the studies are {sorted(CARD_SOURCES)}")
    suite = {s: config.suites.get(s, s) for s in CARD_SOURCES}
    models = model_registry.models()
    with warehouse.get_connection() as con:
        inputs = {s: [_read(con, suite[s], t) for t in card.tables] for s, card in CARD_SOURCES.items()}
        previous = _read(con, GROUP, "robustness_report_card")
        comparisons = {s: _read(con, suite[s], "model_comparison") for s in CARD_SOURCES}
    present = [
        s
        for s, frames in inputs.items()
        if all(
            f is not None and len(f)
            for t, f in zip(CARD_SOURCES[s].tables, frames)
            if t not in CARD_SOURCES[s].optional
        )
    ]
    parts = [CARD_SOURCES[s].rows(*inputs[s]) for s in present]
    rows = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=ReportCard.to_schema().columns)
    # the registry's models only: a model removed from it is history, named in the metadata
    registered = {m.id for m in models}
    partitions = set(context.instance.get_dynamic_partitions(model_partitions.name))
    left_out = {
        m: {
            **last_run(context.instance, [dg.AssetKey([suite[s], studies()[s].generations]) for s in present], m),
            "partition_removed": m not in partitions,
        }
        for m in sorted(set(rows["model_id"]) - registered)
    }
    rows = rows[rows["model_id"].isin(registered)].reset_index(drop=True)
    versions = {
        (m, s): evaluated_fingerprint(context.instance, s, m, suite[s]) or "unrecorded"
        for m, s in zip(rows["model_id"], rows["study"])
    }
    now = pd.Timestamp.now(tz="UTC").tz_localize(None)
    card = build_card(rows, versions, now, previous)
    blocking = [
        regression_check(c, models, s).blocking.assign(study=s)
        for s, c in comparisons.items()
        if c is not None and len(c)
    ]
    regressions = (
        pd.concat(blocking, ignore_index=True)
        if blocking
        else pd.DataFrame(
            columns=["study", "candidate_id", "metric", "slice", "difference", "ci_low", "ci_high", "p_holm"]
        )
    )
    missing = sorted(set(CARD_SOURCES) - set(present))
    next_step = studies_to_run(missing)
    # what running each missing study costs for the registered models (calls; time on this machine for local ones)
    planned = {
        s: planned_run(
            context.instance,
            studies()[s],
            [m for m in models if studies()[s].takes_documents or m.provider not in WORKFLOW_PROVIDERS],
        )
        for s in missing
    }
    top = regressions_markdown(regressions)
    # in place in the UI (shorter than INLINE_MD_CHARS) and narrow; every cell in full in "card (in full)"
    # the studies left to run: in place when the card is empty, else in the "next_step" entry below
    note = f"\n\n_{next_step}_" if next_step and not len(card) else ""
    cost = "".join(f"\n- {s}: {text}" for s, text in planned.items() if text)
    if note and cost:  # with what each costs, when it still fits in place
        full = f"{note}\n\n_planned, nothing cached:_{cost}"
        note = (
            full
            if js_length(full) + js_length(card_markdown(card)) + 2 < INLINE_MD_CHARS
            else note + ("\n\n_calls and time per study: the entry planned_")
        )
    room = INLINE_MD_CHARS - (js_length(top) + 2 if top else 0) - js_length(note)
    text = card_markdown(card, limit=room) + note
    compared = [c.assign(study=s) for s, c in comparisons.items() if c is not None and len(c)]
    seen = detectable_markdown(pd.concat(compared, ignore_index=True)) if compared else None
    cur_rows = card[card["is_current"]] if len(card) else card
    md = {
        "report_card": dg.MetadataValue.md(f"{top}\n\n{text}" if top else text),
        "card (in full)": dg.MetadataValue.json(card_records(cur_rows)),
        "plot": plots.report_card_by_study(card),
        "trend": plots.report_card_trends(trend_series(card)),
        "studies": dg.MetadataValue.json(
            {"included": present, "missing": missing, **({"suites": dict(config.suites)} if config.suites else {})}
        ),
        "models_with_previous_version": dg.MetadataValue.json(
            sorted(set(card.loc[card["is_current"] & card["previous_version"].notna(), "model_id"]))
        ),
        "regressed_candidates": dg.MetadataValue.json(sorted(set(regressions["candidate_id"]))),
    }
    md.update(left_out_metadata(left_out, model_registry.path))
    if seen:
        md["verdict_power"] = dg.MetadataValue.md(seen)
    if next_step:
        md["next_step"] = dg.MetadataValue.text(next_step)
        md["planned"] = dg.MetadataValue.json({s: f"nothing cached: {text}" for s, text in planned.items()})
    cur = card[card["is_current"] & card["value"].notna()] if len(card) else card
    for r in cur.itertuples():
        # every card unit is % or pp: one decimal
        md[trend_key(r.model_id, r.study, r.metric, r.slice)] = dg.MetadataValue.float(display_float(r.value, True))
    yield validated_output(ReportCard, card, "robustness_report_card", md)
    per_study = {s: sorted(set(g["candidate_id"])) for s, g in regressions.groupby("study")} if len(regressions) else {}
    yield dg.AssetCheckResult(
        check_name=CARD_CHECK,
        passed=regressions.empty,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "regressed_candidates": dg.MetadataValue.json(per_study),
            "regressed_rows": dg.MetadataValue.json(
                [{"study": s, **r} for s, g in regressions.groupby("study", sort=True) for r in regression_records(g)]
                if len(regressions)
                else []
            ),
        },
    )
