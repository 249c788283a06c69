"""pandera schemas of the WorkflowPerturb study's intermediate tables (issue #4).

Lineage: ``golden_id`` (golden) → ``variant_id`` (perturbation; ``operator`` deterministic / llm,
``model``) → metric row (``variant_id``) → analysis cells.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing.pandas import Series


class _Strict(pa.DataFrameModel):
    class Config:
        strict = True
        coerce = True


class Goldens(_Strict):
    """``goldens``: every loaded golden workflow; rows breaking a §3.1 rule are kept and flagged."""

    golden_id: Series[str] = pa.Field(unique=True, description="Workflow id.")
    task: Series[str] = pa.Field(description="Task text.")
    origin: Series[str] = pa.Field(description="Sub-source (alfworld, wikihow, ..., embedded).")
    source_spec: Series[str] = pa.Field(description="Source spec the golden was loaded from.")
    n_nodes: Series[int] = pa.Field(ge=0, description="|V|: number of steps.")
    stratum: Series[str] = pa.Field(description="Size stratum (5-7, 8-15, 16+; <5 below the minimum).")
    nodes_json: Series[str] = pa.Field(description="Step descriptions in node-id order (JSON list).")
    edges_json: Series[str] = pa.Field(description="Edges incl. START/END (JSON list of pairs).")
    workflow_text: Series[str] = pa.Field(description="The workflow in WorFBench Node:/Edge: format.")
    valid: Series[bool] = pa.Field(description="Passes §3.1 (DAG, >= 5 nodes, edges name existing nodes).")
    rejection_reason: Series[str] = pa.Field(nullable=True, description="Why the golden was rejected, else null.")


class Perturbations(_Strict):
    """``perturbations`` / ``llm_perturbations``: one row per golden × type × severity variant."""

    variant_id: Series[str] = pa.Field(description="<golden>::<type>@<pct>.")
    golden_id: Series[str] = pa.Field(description="The golden it perturbs.")
    type: Series[str] = pa.Field(isin=["missing", "compressed", "description"], description="Perturbation type (§3.1).")
    p: Series[float] = pa.Field(isin=[0.1, 0.3, 0.5], description="Severity p (fraction of nodes).")
    n_altered: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=1, description="N nodes altered (N = max(1, round-half-up(p·|V|)), capped at |V|−1).")
    altered_node_ids: Series[str] = pa.Field(description="Golden node ids altered (JSON list).")
    target_score: Series[float] = pa.Field(ge=0, le=1, description="1 − p for missing/compressed, 1.0 for description (§3.1).")
    operator: Series[str] = pa.Field(isin=["deterministic", "llm"], description="Who made the variant.")
    method: Series[str] = pa.Field(nullable=True, description="Operator detail (remove/merge/paraphrase, llm, hybrid).")
    model: Series[str] = pa.Field(nullable=True, description="Generator model (llm rows).")
    models_tried: Series[str] = pa.Field(description="Escalation list actually used (JSON list).")
    attempts: Series[int] = pa.Field(ge=0, description="Generator attempts (0 for deterministic).")
    status: Series[str] = pa.Field(isin=["valid", "invalid"], description="Static validation result (App. A).")
    failure: Series[str] = pa.Field(nullable=True, description="Residual validation failure, else null.")
    n_nodes: Series[pd.Int64Dtype] = pa.Field(nullable=True, description="Steps of the variant; null when no reply parsed.")
    nodes_json: Series[str] = pa.Field(nullable=True, description="Variant steps (JSON list).")
    edges_json: Series[str] = pa.Field(nullable=True, description="Variant edges (JSON list).")
    workflow_text: Series[str] = pa.Field(nullable=True, description="Variant in Node:/Edge: format.")
    raw_output: Series[str] = pa.Field(nullable=True, description="Last raw generator reply (llm rows).")
    model_id: Series[str] = pa.Field(description="Registry model id of the generator ('deterministic' for rules).")


class PerturbationScores(_Strict):
    """``perturbation_scores``: every non-judge metric of each variant against its golden (§4, App. B)."""

    model_id: Series[str] = pa.Field(description="Generator ('deterministic' or a registry model id).")
    variant_id: Series[str] = pa.Field(description="Variant id.")
    golden_id: Series[str] = pa.Field(description="Golden id.")
    type: Series[str] = pa.Field(description="Perturbation type.")
    severity: Series[float] = pa.Field(description="Severity p.")
    n_nodes: Series[int] = pa.Field(description="Golden |V|.")
    stratum: Series[str] = pa.Field(description="Golden size stratum.")
    operator: Series[str] = pa.Field(description="deterministic / llm.")
    status: Series[str] = pa.Field(description="Variant validation status.")
    target_score: Series[float] = pa.Field(description="Calibrated target score (§3.1).")
    chain_f1: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="Chain F1 (LIS of aligned gold indices).")
    graph_f1: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="Graph F1 (common connected subgraph).")
    bleu: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="BLEU (nltk, smoothing method1).")
    gleu: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="GLEU (nltk sentence_gleu).")
    bertscore_f1: Series[float] = pa.Field(nullable=True, description="BERTScore F1 over order-aligned pairs (not rescaled).")
    kendall_tau: Series[float] = pa.Field(nullable=True, ge=-1, le=1, description="Kendall τ over aligned steps; null when undefined.")
    kendall_tau_reason: Series[str] = pa.Field(nullable=True, description="Why τ is null (< 2 aligned, constant ranks).")
    n_aligned: Series[pd.Int64Dtype] = pa.Field(nullable=True, description="Aligned step pairs (similarity >= 0.8).")
    encoder: Series[str] = pa.Field(nullable=True, description="Sentence encoder used for alignment.")
    bertscore_model: Series[str] = pa.Field(nullable=True, description="BERTScore model (local path or name).")


class JudgeScores(_Strict):
    """``judge_scores``: LLM-as-judge (App. B.6), three calls per variant, invalid replies excluded."""

    model_id: Series[str] = pa.Field(description="Judge model (registry id; the partition).")
    variant_id: Series[str] = pa.Field(description="Variant judged.")
    golden_id: Series[str] = pa.Field(description="Golden id.")
    type: Series[str] = pa.Field(description="Perturbation type.")
    severity: Series[float] = pa.Field(description="Severity p.")
    judge: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="Mean valid score / 5; null when no reply was valid.")
    judge_valid: Series[int] = pa.Field(ge=0, description="Valid replies.")
    judge_invalid: Series[int] = pa.Field(ge=0, description="Invalid or truncated replies (excluded, never 0).")
    judge_reasons: Series[str] = pa.Field(description="Parse reason of each reply (JSON list).")
    generation_keys: Series[str] = pa.Field(description="Cache keys of the three calls (JSON list).")


def _firing_table():
    from metamorph.schemas.workflow_metrics import FiringMatrix

    class FiringMatrixTable(FiringMatrix):
        """``firing_matrix``: :class:`FiringMatrix` rows for each threshold set (Table 1 defaults and
        the recalibrated ones)."""

        thresholds: Series[str] = pa.Field(isin=["table1_default", "recalibrated"],
                                           description="Which thresholds the bundles used.")

    return FiringMatrixTable


FiringMatrixTable = _firing_table()
