"""Glue of the WorkflowPerturb study: goldens and perturbations as rows, and their scoring.

* :func:`golden_rows` / :func:`workflow_from_record` — goldens to table rows and back (rejected
  goldens are kept as rows with ``valid = False`` and their reason, never dropped);
* :func:`deterministic_perturbations` — every golden × type × severity with the rule-based
  operators of :mod:`metamorph.studies.workflow_perturb.perturb` (seeded);
* :func:`score_perturbations` — every non-judge metric of :mod:`metamorph.studies.workflow_perturb.metrics`
  for each variant against its golden (texts embedded once per batch);
* :func:`judge_requests` / :func:`judge_row` — the LLM judge (App. B.6): three calls per
  variant, replies parsed and averaged, invalid replies excluded and counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from metamorph.measurability import every_call_failed, no_reply_parsed
from metamorph.providers.base import GenerationRequest, GenerationResult
from metamorph.replicates import seeded
from metamorph.studies.workflow_perturb.judge import (
    JUDGE_REPLY_SCHEMA,
    JUDGE_MAX_SCORE,
    JUDGE_N_CALLS,
    judge_messages,
    judge_score,
    parse_judge_reply,
)
from metamorph.studies.workflow_perturb.metrics import score_workflows
from metamorph.studies.workflow_perturb.perturb import Perturbation, perturb_deterministic
from metamorph.studies.workflow_perturb.vocab import PERTURBATION_TYPES, SEVERITIES, VARIANT_METRICS
from metamorph.studies.workflow_perturb.workflows import (
    RejectedGolden,
    Workflow,
    format_workflow,
    size_stratum,
)

__all__ = [
    "JUDGE_MAX_TOKENS",
    "JUDGE_SPREAD_DETERMINISTIC",
    "LLM_SEVERITIES",
    "MAX_ATTEMPTS",
    "METRIC_COLUMNS",
    "PROBLEM_TEMPLATE_TOKENS",
    "cost_steps",
    "deterministic_perturbations",
    "planned_goldens",
    "generator_params",
    "generator_requests",
    "golden_rows",
    "judge_plan_requests",
    "judge_requests",
    "judge_row",
    "score_perturbations",
    "workflow_from_record",
]

#: The per-variant metric columns of the score rows (:data:`.vocab.VARIANT_METRICS`).
METRIC_COLUMNS = VARIANT_METRICS


def golden_rows(valid: Iterable[Workflow], rejected: Iterable[RejectedGolden], spec: str) -> list[dict[str, Any]]:
    """Rows of the ``goldens`` table: every loaded golden, valid or rejected (with its reason)."""
    rows = []
    for w, reason in [(w, None) for w in valid] + [(r.workflow, r.reason) for r in rejected]:
        rows.append(
            {
                "golden_id": w.workflow_id,
                "task": w.task,
                "origin": w.source,
                "source_spec": spec,
                "n_nodes": w.n_nodes,
                "stratum": size_stratum(w.n_nodes),
                "nodes_json": json.dumps(list(w.nodes), ensure_ascii=False),
                "edges_json": json.dumps([list(e) for e in w.edges]),
                "workflow_text": format_workflow(w),
                "valid": reason is None,
                "rejection_reason": reason,
            }
        )
    return rows


def workflow_from_record(r: Any, id_field: str = "golden_id") -> Workflow:
    """A :class:`Workflow` from a ``goldens`` / ``perturbations`` row (``nodes_json``, ``edges_json``)."""
    return Workflow(
        workflow_id=str(getattr(r, id_field)),
        task=str(getattr(r, "task", "") or ""),
        nodes=tuple(json.loads(r.nodes_json)),
        edges=tuple(tuple(e) for e in json.loads(r.edges_json)),
        source=str(getattr(r, "origin", "") or ""),
    )


def deterministic_perturbations(
    goldens: Sequence[Workflow],
    types: Sequence[str] = PERTURBATION_TYPES,
    severities: Sequence[float] = SEVERITIES,
    seed: int = 0,
) -> list[Perturbation]:
    """Every golden × type × severity with the deterministic operators (§3.1, no LLM)."""
    return [perturb_deterministic(w, t, p, seed=seed) for w in goldens for t in types for p in severities]


def score_perturbations(
    goldens: dict[str, Workflow], variants: pd.DataFrame, encoder: Any, bertscore: bool = True, counts: Any = None
) -> pd.DataFrame:
    """Score each variant (a ``perturbations`` row with a workflow) against its golden
    (:func:`~metamorph.studies.workflow_perturb.metrics.score_workflows`: each distinct step text
    through the encoder once; ``counts``, an ``EncodingCounts``, receives how many).

    Returns one row per scored variant: ``variant_id, golden_id`` + :data:`METRIC_COLUMNS` + their
    ``*_reason`` columns, ``n_aligned``, and the encoder / BERTScore provenance columns. Variants
    without a workflow (an LLM row that never parsed) are not scored; the caller reports them.
    """
    have = variants[variants["nodes_json"].notna()]
    pairs = [(goldens[r.golden_id], workflow_from_record(r, "variant_id")) for r in have.itertuples()]
    scored = score_workflows(pairs, encoder, bertscore=bertscore, counts=counts) if pairs else []
    keep = [
        *METRIC_COLUMNS,
        *(f"{m}_reason" for m in METRIC_COLUMNS),
        "n_aligned",
        "encoder",
        "bertscore_model",
        "bertscore_num_layers",
        "bertscore_rescaled",
        "bertscore_baseline",
    ]
    rows = [
        {"variant_id": r.variant_id, "golden_id": r.golden_id, **{k: s.get(k) for k in keep}}
        for r, s in zip(have.itertuples(), scored)
    ]
    out = pd.DataFrame(rows, columns=["variant_id", "golden_id", *keep])
    for m in METRIC_COLUMNS:
        out[m] = out[m].astype(float)
    return out


def judge_requests(
    golden: Workflow,
    variant: Workflow,
    provider: str,
    model: str,
    params: dict[str, Any],
    base_url: str | None = None,
    constrained: bool = False,
) -> list[GenerationRequest]:
    """The :data:`JUDGE_N_CALLS` judge calls for one variant (repeat index 1..3 in the cache key).

    ``constrained=True`` adds ``response_format = {"type": "json_object", "schema":``
    :data:`~metamorph.studies.workflow_perturb.judge.JUDGE_REPLY_SCHEMA` ``}`` (decoding
    constrained to the B.6.4 object; an option for small local judges, not the paper's judge);
    the parameter is part of the cache key, so constrained and free replies never mix. Call i is
    replicate i (:func:`metamorph.replicates.seeded`): its own seed when ``params``
    sample; at the paper's temperature 0 the calls keep one seed, and a deterministic judge (a
    local model) answers all three with one computation (App. B.6.5's calls absorb an API
    backend's non-determinism, which a deterministic judge does not have)."""
    msgs = tuple(judge_messages(golden, variant, golden.task))  # nodes AND edges (App. B.6)
    p = dict(params)
    if constrained:
        p["response_format"] = {"type": "json_object", "schema": JUDGE_REPLY_SCHEMA}
    return [
        seeded(
            GenerationRequest(
                provider=provider,
                model=model,
                messages=msgs,
                params=dict(p),
                base_url=base_url,
                renderer_version="workflow-judge-b6-v2",
                repeat_index=i,
            )
        )
        for i in range(1, JUDGE_N_CALLS + 1)
    ]


#: Why the judge's call-to-call spread is null when its calls are one computation.
JUDGE_SPREAD_DETERMINISTIC = "not measurable: deterministic decoding (the judge's calls are one shared computation)"


def judge_row(results: Sequence[GenerationResult], keys: Sequence[str] | None = None) -> dict[str, Any]:
    """Average the judge replies of one variant: ``judge`` in [0,1] (None when no reply is valid),
    ``n_calls`` (the calls made), ``judge_valid``, ``judge_invalid`` (replies that did not parse), ``n_call_errors`` (calls
    that failed at the provider: no reply, in neither count), ``not_measurable`` (why ``judge``
    is null: "not measurable: every call failed (N of N)" or "not measurable: no reply parsed (N
    of N unparseable)"), each call's parse reason (JSON list, ``call_error`` for a failed call), and
    ``judge_spread``: max − min of the valid calls' scores / 5 (the residual call-to-call variation
    App. B.6.5's three calls absorb; null with fewer than 2 valid replies). ``keys`` are the
    calls' generation keys: when several calls share one (a deterministic judge, one computation,
    :mod:`metamorph.replicates`) the spread is null and ``judge_spread_note`` says
    :data:`JUDGE_SPREAD_DETERMINISTIC`."""
    reasons = [parse_judge_reply(r.text, r.finish_reason)[1] if r.error is None else "call_error" for r in results]
    mean, n_valid, n_invalid = judge_score(results)
    n_errors = sum(r.error is not None for r in results)
    n_invalid -= n_errors  # judge_score counts a failed call as invalid: it is no reply
    valid = [
        s for r in results if r.error is None for s in [parse_judge_reply(r.text, r.finish_reason)[0]] if s is not None
    ]
    shared = keys is not None and len(keys) > 1 and len(set(keys)) == 1
    spread = None if shared or len(valid) < 2 else (max(valid) - min(valid)) / JUDGE_MAX_SCORE
    return {
        "judge": mean,
        "n_calls": len(results),
        "judge_valid": n_valid,
        "judge_invalid": n_invalid,
        "n_call_errors": n_errors,
        "not_measurable": None
        if mean is not None
        else every_call_failed(n_errors)
        if n_errors == len(results)
        else no_reply_parsed(n_invalid),
        "judge_reasons": json.dumps(reasons),
        "judge_spread": spread,
        "judge_spread_note": JUDGE_SPREAD_DETERMINISTIC if shared else None,
    }


# ------------------------------------------------------------------------------------------
# Cost plan: the requests perturbations_llm and judge_scores send

#: Defaults of the generation assets' own config fields (assets/workflow_perturb.py ``LLMPerturbConfig``,
#: ``JudgeConfig`` take them from here), which ``metamorph plan`` plans with; the options' defaults
#: (``--llm-goldens``, ``--max-tokens``, ``--judge-variants``) are their declarations' (study.py).
LLM_SEVERITIES, MAX_ATTEMPTS, JUDGE_MAX_TOKENS = (0.3,), 2, 400
#: Template text of a refinement turn's validation problem, in estimated tokens, beyond the
#: quoted reply (the longest problem of validate.check_variant is under 160 characters).
PROBLEM_TEMPLATE_TOKENS = 50


def generator_params(spec: Any, max_tokens: int) -> dict[str, Any]:
    """Decoding parameters of the LLM generator's calls for registry entry ``spec``: temperature 0,
    ``max_tokens``, seed 0, then the entry's ``params`` without ``response_format`` (the reply is
    Node:/Edge: text); a ``None`` value removes a parameter. Used by ``perturbations_llm``."""
    params = {
        "temperature": 0.0,
        "max_tokens": max_tokens,
        "seed": 0,
        **{k: v for k, v in spec.params.items() if k != "response_format"},
    }
    return {k: v for k, v in params.items() if v is not None}


def _reply_standin(max_tokens: int) -> str:
    """A stand-in for a reply of ``max_tokens`` tokens: ``" abc"`` (4 characters, one token in the
    estimate and in common BPE vocabularies) ``max_tokens`` times."""
    return " abc" * max_tokens


def generator_requests(
    goldens: Sequence[Workflow],
    types: Sequence[str],
    severities: Sequence[float],
    spec: Any,
    *,
    max_attempts: int,
    max_tokens: int,
    hybrid: bool,
) -> tuple[list[GenerationRequest], list[GenerationRequest]]:
    """The LLM generator's calls to registry entry ``spec`` for every golden × type × severity
    (:func:`~metamorph.studies.workflow_perturb.generate.generate_perturbation`, seed 0).

    Returns ``(first, more)``:

    * ``first``: the first attempt of every row — exact, built by
      :func:`~metamorph.studies.workflow_perturb.generate.build_request` as the run builds it
      (so their cache keys are the run's);
    * ``more``: every further call the row can make with this model, an upper bound: attempts
      2..``max_attempts`` (each carrying, per earlier attempt, a reply of ``max_tokens`` tokens
      and the feedback turn quoting it, :func:`_reply_standin`), and for ``description`` rows with
      ``hybrid`` the per-node fallback (A.10): for each of the N node ids the run draws, the exact
      first node request and its retries likewise. Stand-in requests never hit the cache.

    For an escalation model every call is conditional: plan ``first + more`` as its bound.
    """
    from metamorph.studies.workflow_perturb import generate as gen
    from metamorph.studies.workflow_perturb.perturb import n_to_alter, row_seed
    import random

    params = generator_params(spec, max_tokens)
    reply = _reply_standin(max_tokens)
    feedback = gen.feedback_message(reply + _reply_standin(PROBLEM_TEMPLATE_TOKENS))

    def req(messages):
        return gen.build_request(spec.provider, spec.model, messages, params=params, base_url=spec.base_url)

    def retries(base, turn):
        return [
            req(base + [{"role": "assistant", "content": reply}, {"role": "user", "content": turn}] * k)
            for k in range(1, max_attempts)
        ]

    first, more = [], []
    for w in goldens:
        for t in types:
            for p in severities:
                n = n_to_alter(p, w.n_nodes)
                base = gen.build_messages(w, t, n)
                first.append(req(base))
                more += retries(base, feedback)
                if t == "description" and hybrid:
                    rng = random.Random(row_seed(w.workflow_id, "description", p, 0))
                    for nid in sorted(rng.sample(list(w.node_ids), n), key=int):
                        node = gen.build_node_messages(w, nid)
                        more.append(req(node))
                        more += retries(node, f"That is not usable: {reply}. Answer with the reworded step only.")
    return first, more


def judge_plan_requests(
    goldens: Sequence[Workflow], spec: Any, n_variants: int, max_tokens: int, constrained: bool = False
) -> list[GenerationRequest]:
    """The exact requests of ``judge_scores`` for registry entry ``spec``: the first ``n_variants``
    deterministic variants (every type and severity, seed 0, as ``perturbations`` builds them),
    read back as the asset reads its rows, 3 calls each (:func:`judge_requests`)."""
    perts = deterministic_perturbations(goldens)
    rows = pd.DataFrame([p.to_row() for p in perts]).head(n_variants)
    gold = {w.workflow_id: w for w in goldens}
    params = {"temperature": 0.0, "max_tokens": max_tokens, "seed": 0}
    return [
        q
        for r in rows.itertuples()
        for q in judge_requests(
            gold[r.golden_id],
            workflow_from_record(r, "variant_id"),
            spec.provider,
            spec.model,
            params,
            spec.base_url,
            constrained=constrained,
        )
    ]


def planned_goldens(options: Any) -> list:
    """The valid goldens a run with ``options`` (sources, limit) loads, as the assets read the
    goldens table: by ``golden_id``, in table order. Raises the loader's :class:`~metamorph.errors.InputError`."""
    from metamorph.studies.workflow_perturb.study import STUDY as DECLARED

    rows = []
    for spec, valid, rejected in DECLARED.sources_of(options):  # as the goldens asset loads them
        rows += golden_rows(valid, rejected, spec)
    return list(
        {r.golden_id: workflow_from_record(r) for r in pd.DataFrame(rows).itertuples() if r.valid}.values()
        if rows
        else []
    )


def cost_steps(model: Any, options: Any) -> list:
    """The run's generation steps for ``model`` (``metamorph plan``, :mod:`metamorph.costplan`):

    1. ``perturbations_llm``: the first attempt of every golden × type × severity (exact);
    2. ``perturbations_llm retries``: up to ``max_attempts − 1`` more attempts per row and the
       per-node fallback of description rows — they happen only when replies fail validation, so
       the step is planned "up to" (:func:`generator_requests`);
    3. ``judge_scores``: 3 calls per judged deterministic variant (exact).

    ``options``: the study's :class:`metamorph.study.Options` (``STUDY.values(...)``); the defaults
    are the assets' (sources ``embedded``, every row, the first ``llm_goldens`` valid goldens, the
    three types at :data:`LLM_SEVERITIES`, :data:`MAX_ATTEMPTS` attempts, the generator's
    ``max_tokens``, no escalation model, ``judge_variants`` judged variants with max_tokens
    :data:`JUDGE_MAX_TOKENS`). Raises the loader's
    :class:`~metamorph.errors.InputError`.
    """
    from metamorph.costplan import PlanStep

    goldens = planned_goldens(options)
    first, more = generator_requests(
        goldens[: options.llm_goldens],
        PERTURBATION_TYPES,
        LLM_SEVERITIES,
        model,
        max_attempts=MAX_ATTEMPTS,
        max_tokens=options.max_tokens,
        hybrid=True,
    )
    judge = judge_plan_requests(
        goldens,
        model,
        options.judge_variants,
        JUDGE_MAX_TOKENS,
        bool(options.judge_constrained),
    )
    return [
        PlanStep.exact("perturbations_llm", first),
        PlanStep("perturbations_llm retries", (((), tuple(more)),)),
        PlanStep.exact("judge_scores", judge),
    ]
