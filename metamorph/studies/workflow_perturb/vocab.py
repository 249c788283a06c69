"""WorkflowPerturb's vocabulary, declared once ("Calibrated Stress Tests for Evaluating Multi-Agent
Workflow Metrics", arXiv 2602.17990).

Every other module of the study — perturbation operators, plan, analysis, gate, schemas' ``isin``
checks, lineage, reports — refers to these names instead of spelling the lists again; the SQL
views are checked against them by a test.

* :data:`PERTURBATION_TYPES` — missing / compressed / paraphrased steps (§3.1), with the paper's
  names :data:`TYPE_NAMES`; the gate's failure modes are the same three (:data:`FAILURE_MODES`);
* :data:`SEVERITIES` — the fraction of steps altered;
* :data:`VARIANT_METRICS` — the metrics computed per variant; :data:`METRICS` adds the LLM judge;
* :data:`OPERATORS` — who made a variant; :data:`STATUSES` — its static validation result;
* :data:`SIZE_STRATA` — the size strata of the goldens (labels :data:`STRATA`);
* :data:`GATE_MODES` — how a failure-mode bundle fires, :data:`DEFAULT_GATE_MODE` the default;
  :data:`BUNDLE_ROLES` — a metric's role in a bundle;
* :data:`RECALIBRATION_RULES` and :data:`THRESHOLD_SETS` — recalibrated thresholds (§6).
"""

from __future__ import annotations

import math

__all__ = [
    "BUNDLE_ROLES",
    "DEFAULT_GATE_MODE",
    "FAILURE_MODES",
    "GATE_MODES",
    "METRICS",
    "OPERATORS",
    "PERTURBATION_TYPES",
    "RECALIBRATION_RULES",
    "SEVERITIES",
    "SIZE_STRATA",
    "STATUSES",
    "STRATA",
    "THRESHOLD_SETS",
    "TYPE_NAMES",
    "VARIANT_METRICS",
]

#: Perturbation types (§3.1), in the paper's order.
PERTURBATION_TYPES: tuple[str, ...] = ("missing", "compressed", "description")

#: The paper's name of each perturbation type.
TYPE_NAMES: dict[str, str] = {
    "missing": "Missing Steps",
    "compressed": "Compressed Steps",
    "description": "Description Changes",
}

#: The gate's failure modes: one per perturbation type, in the paper's order (Table 1).
FAILURE_MODES: tuple[str, ...] = PERTURBATION_TYPES

#: Severity levels p (§3.1): the fraction of steps altered.
SEVERITIES: tuple[float, ...] = (0.1, 0.3, 0.5)

#: The metrics computed for every variant, in table order: Chain F1, Graph F1, BLEU, GLEU,
#: BERTScore F1, Kendall τ.
VARIANT_METRICS: tuple[str, ...] = ("chain_f1", "graph_f1", "bleu", "gleu", "bertscore_f1", "kendall_tau")

#: Every metric of the scores frame: the variant metrics and the LLM judge.
METRICS: tuple[str, ...] = (*VARIANT_METRICS, "judge")

#: Who made a variant: the deterministic operators or the LLM (App. A).
OPERATORS: tuple[str, ...] = ("deterministic", "llm")

#: Result of a variant: passed static validation (App. A), failed it, or ``call_error`` — no call of
#: any generator model returned a reply (every attempt failed at the provider), so the model never
#: made the variant and nothing about its ability to is measured.
STATUSES: tuple[str, ...] = ("valid", "invalid", "call_error")

#: Size strata of the paper's per-size analysis (App. C, Table 7): label -> inclusive step range.
SIZE_STRATA: dict[str, tuple[int, float]] = {"5-7": (5, 7), "8-15": (8, 15), "16+": (16, math.inf)}

#: Size-stratum labels, smallest first.
STRATA: tuple[str, ...] = tuple(SIZE_STRATA)

#: How a failure-mode bundle fires (the first is the default; see :mod:`.gate`).
GATE_MODES: tuple[str, ...] = ("primary_and_secondary", "any", "joint")

#: The default bundle firing mode.
DEFAULT_GATE_MODE = GATE_MODES[0]

#: The role of a metric in a failure-mode bundle.
BUNDLE_ROLES: tuple[str, ...] = ("primary", "secondary")

#: How a threshold is recalibrated between the mild and moderate score distributions (§6).
RECALIBRATION_RULES: tuple[str, ...] = ("midpoint", "mild")

#: The threshold sets the firing matrix is computed with: Table 1's defaults and the recalibrated ones.
THRESHOLD_SETS: tuple[str, ...] = ("table1_default", "recalibrated")
