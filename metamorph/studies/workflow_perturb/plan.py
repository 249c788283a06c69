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

from metamorph.providers.base import GenerationRequest, GenerationResult
from metamorph.studies.workflow_perturb.judge import (
    JUDGE_REPLY_SCHEMA,
    JUDGE_N_CALLS,
    judge_messages,
    judge_score,
    parse_judge_reply,
)
from metamorph.studies.workflow_perturb.metrics import score_workflows
from metamorph.studies.workflow_perturb.perturb import (
    PERTURBATION_TYPES,
    SEVERITIES,
    Perturbation,
    perturb_deterministic,
)
from metamorph.studies.workflow_perturb.workflows import (
    RejectedGolden,
    Workflow,
    format_workflow,
    size_stratum,
)

METRIC_COLUMNS = ("chain_f1", "graph_f1", "bleu", "gleu", "bertscore_f1", "kendall_tau")


def golden_rows(valid: Iterable[Workflow], rejected: Iterable[RejectedGolden], spec: str) -> list[dict[str, Any]]:
    """Rows of the ``goldens`` table: every loaded golden, valid or rejected (with its reason)."""
    rows = []
    for w, reason in [(w, None) for w in valid] + [(r.workflow, r.reason) for r in rejected]:
        rows.append({"golden_id": w.workflow_id, "task": w.task, "origin": w.source, "source_spec": spec,
                     "n_nodes": w.n_nodes, "stratum": size_stratum(w.n_nodes),
                     "nodes_json": json.dumps(list(w.nodes), ensure_ascii=False),
                     "edges_json": json.dumps([list(e) for e in w.edges]), "workflow_text": format_workflow(w),
                     "valid": reason is None, "rejection_reason": reason})
    return rows


def workflow_from_record(r: Any, id_field: str = "golden_id") -> Workflow:
    """A :class:`Workflow` from a ``goldens`` / ``perturbations`` row (``nodes_json``, ``edges_json``)."""
    return Workflow(workflow_id=str(getattr(r, id_field)), task=str(getattr(r, "task", "") or ""),
                    nodes=tuple(json.loads(r.nodes_json)), edges=tuple(tuple(e) for e in json.loads(r.edges_json)),
                    source=str(getattr(r, "origin", "") or ""))


def deterministic_perturbations(goldens: Sequence[Workflow], types: Sequence[str] = PERTURBATION_TYPES,
                                severities: Sequence[float] = SEVERITIES, seed: int = 0) -> list[Perturbation]:
    """Every golden × type × severity with the deterministic operators (§3.1, no LLM)."""
    return [perturb_deterministic(w, t, p, seed=seed) for w in goldens for t in types for p in severities]


def score_perturbations(goldens: dict[str, Workflow], variants: pd.DataFrame, encoder: Any,
                        bertscore: bool = True, counts: Any = None) -> pd.DataFrame:
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
    keep = [*METRIC_COLUMNS, *(f"{m}_reason" for m in METRIC_COLUMNS), "n_aligned", "encoder",
            "bertscore_model", "bertscore_num_layers", "bertscore_rescaled", "bertscore_baseline"]
    rows = [{"variant_id": r.variant_id, "golden_id": r.golden_id, **{k: s.get(k) for k in keep}}
            for r, s in zip(have.itertuples(), scored)]
    out = pd.DataFrame(rows, columns=["variant_id", "golden_id", *keep])
    for m in METRIC_COLUMNS:
        out[m] = out[m].astype(float)
    return out


def judge_requests(golden: Workflow, variant: Workflow, provider: str, model: str, params: dict[str, Any],
                   base_url: str | None = None, constrained: bool = False) -> list[GenerationRequest]:
    """The :data:`JUDGE_N_CALLS` judge calls for one variant (repeat index 1..3 in the cache key).

    ``constrained=True`` adds ``response_format = {"type": "json_object", "schema":``
    :data:`~metamorph.studies.workflow_perturb.judge.JUDGE_REPLY_SCHEMA` ``}`` (decoding
    constrained to the B.6.4 object; an option for small local judges, not the paper's judge);
    the parameter is part of the cache key, so constrained and free replies never mix."""
    msgs = tuple(judge_messages(golden, variant, golden.task))  # nodes AND edges (App. B.6)
    p = dict(params)
    if constrained:
        p["response_format"] = {"type": "json_object", "schema": JUDGE_REPLY_SCHEMA}
    return [GenerationRequest(provider=provider, model=model, messages=msgs, params=p, base_url=base_url,
                              renderer_version="workflow-judge-b6-v2", repeat_index=i)
            for i in range(1, JUDGE_N_CALLS + 1)]


def judge_row(results: Sequence[GenerationResult]) -> dict[str, Any]:
    """Average the judge replies of one variant: ``judge`` in [0,1] (None when every reply is
    invalid), ``judge_valid``, ``judge_invalid`` and each reply's parse reason (JSON list)."""
    reasons = [parse_judge_reply(r.text, r.finish_reason)[1] if r.error is None else "call_error" for r in results]
    mean, n_valid, n_invalid = judge_score(results)
    return {"judge": mean, "judge_valid": n_valid, "judge_invalid": n_invalid, "judge_reasons": json.dumps(reasons)}
