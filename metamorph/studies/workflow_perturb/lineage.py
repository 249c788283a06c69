"""How ``metamorph trace`` reads this study's per-variant metrics (:mod:`metamorph.trace`; views in
``sql/workflow_perturb/lineage_views.sql``).

* ``chain_f1``, ``graph_f1``, ``bleu``, ``gleu``, ``bertscore_f1``, ``kendall_tau``: every variant
  of the generator ``--model`` (``deterministic`` for the rule-based operators, or the registry id
  of the LLM generator) with its score, its golden, its text and — LLM variants — the generator's
  last raw reply, lowest score first (view ``variant_lineage``). Parse reason: the variant's
  validation failure or status (Kendall τ: why τ is null);
* ``judge``: every judge call of the judge ``--model`` (``judge_lineage``): the variant's mean
  judge score (/5), the call's parse reason, and the exact request and raw reply, which only the
  generation cache holds (read-only, by ``generation_key``).

Slices: type, severity, operator, golden_id, stratum, status, variant_id (judge: type, severity,
golden_id, stratum, variant_id, call_index). Rendered input: the variant's workflow text.
"""

from __future__ import annotations

from metamorph.studies.workflow_perturb.vocab import VARIANT_METRICS as METRICS
from metamorph.trace import MetricTrace

__all__ = [
    "TRACES",
    "METRICS",
]

_SLICES = {k: k for k in ("type", "severity", "operator", "golden_id", "stratum", "status", "variant_id")}
_JUDGE_SLICES = {k: k for k in ("type", "severity", "golden_id", "stratum", "variant_id", "call_index")}

#: metric → how its cells are traced.
TRACES = {
    **{
        m: MetricTrace(
            "variant_lineage",
            model="model_id",
            id="variant_id",
            slices=_SLICES,
            input="variant_text",
            answer=m,
            reason="kendall_tau_reason" if m == "kendall_tau" else "coalesce(failure, status)",
            request="NULL",
            response="response_text",
            order=(f"{m} NULLS FIRST", "variant_id"),
            extra=("target_score", "method", "golden_text"),
        )
        for m in METRICS
    },
    "judge": MetricTrace(
        "judge_lineage",
        model="judge_model_id",
        id="variant_id",
        slices=_JUDGE_SLICES,
        input="variant_text",
        answer="judge",
        reason="parse_reason",
        request="NULL",
        response="NULL",
        order=("judge NULLS FIRST", "variant_id", "call_index"),
        extra=("call_index", "judge_valid", "judge_invalid", "generation_key", "golden_text"),
        cache=True,
    ),
}
