"""Workflow-evaluation metrics of the WorkflowPerturb study.

Paper: "WorkflowPerturb: Calibrated Stress Tests for Evaluating Multi-Agent Workflow Metrics"
(Kanda et al., arXiv 2602.17990), §4 and App. B. The structural metrics follow WorFBench's
WorFEval (Qiao et al., ICLR 2025; reference code ``evaluator/graph_evaluator.py``); every place
where this module differs from that reference code is listed under *Deviations* below.

Modules: ``graph`` (inputs), ``alignment``, ``structural`` (Chain F1, Graph F1), ``order``
(Kendall τ), ``lexical`` (BLEU, GLEU), ``semantic`` (BERTScore), ``scoring`` (all of them in one
batch, with the edge-case conventions and the deviations from WorFBench). The LLM judge is
:mod:`metamorph.studies.workflow_perturb.judge`.
"""

from metamorph.studies.workflow_perturb.metrics.alignment import (
    TAU_ALIGN,
    Alignment,
    align,
    similarity_matrix,
)
from metamorph.studies.workflow_perturb.metrics.graph import WorkflowGraph, as_workflow, chain_edges
from metamorph.studies.workflow_perturb.metrics.scoring import EncodingCounts, score_workflow, score_workflows
from metamorph.studies.workflow_perturb.metrics.structural import (
    GRAPH_METHODS,
    chain_f1,
    chain_f1_from_alignment,
    graph_f1,
    graph_f1_from_alignment,
    longest_increasing_subsequence,
    prune_to_common_induced,
)
from metamorph.studies.workflow_perturb.metrics.order import (
    KENDALL_METHODS,
    gold_order_ranks,
    kendall_tau,
    kendall_tau_from_alignment,
    kendall_tau_gold_order,
)
from metamorph.studies.workflow_perturb.metrics.lexical import (
    TOKENIZATIONS,
    bleu,
    bleu_max_order,
    gleu,
    lexical_tokens,
    word_tokens,
)
from metamorph.studies.workflow_perturb.metrics.semantic import (
    baseline_for,
    baseline_pairs,
    bertscore_f1,
    compute_baseline,
    get_bert_scorer,
    packaged_baseline,
    write_baseline,
)

__all__ = [
    "Alignment",
    "EncodingCounts",
    "GRAPH_METHODS",
    "KENDALL_METHODS",
    "TOKENIZATIONS",
    "TAU_ALIGN",
    "WorkflowGraph",
    "align",
    "as_workflow",
    "baseline_for",
    "baseline_pairs",
    "bertscore_f1",
    "compute_baseline",
    "bleu",
    "bleu_max_order",
    "chain_edges",
    "chain_f1",
    "chain_f1_from_alignment",
    "get_bert_scorer",
    "gleu",
    "gold_order_ranks",
    "graph_f1",
    "graph_f1_from_alignment",
    "kendall_tau",
    "kendall_tau_from_alignment",
    "kendall_tau_gold_order",
    "lexical_tokens",
    "longest_increasing_subsequence",
    "packaged_baseline",
    "prune_to_common_induced",
    "score_workflow",
    "score_workflows",
    "similarity_matrix",
    "word_tokens",
    "write_baseline",
]
