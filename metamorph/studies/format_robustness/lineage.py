"""How ``metamorph trace`` reads this study's metric cells (:mod:`metamorph.trace`; views in
``sql/format_robustness/lineage_views.sql``).

* ``M1`` / ``M2`` / ``M3``: the generations of the (instance, repeat) groups violating MR1 / MR2 /
  MR3 — every format of the group (view ``mr_violation_lineage``; the models and slices are those
  of ``decision_lineage``, so a model with no violating group has 0 rows behind its cell);
* ``accuracy``: every generation with a gold label, wrong ones first (``decision_lineage``).

``--model`` is the registry id (``model_id``; a cell's ``workflow_id`` is ``<model id>/<ingestion>``).
Slices: workflow_id, dataset, format, repeat, instance_id. Rendered input: the document; answer:
the extracted decision; parse reason: ``parse_reason`` (``call_error`` for a failed call).
"""

from __future__ import annotations

from metamorph.trace import MetricTrace

__all__ = [
    "TRACES",
]

_SLICES = {k: k for k in ("workflow_id", "dataset", "format", "repeat", "instance_id")}
_COMMON = dict(
    model="model_id",
    id="instance_id",
    slices=_SLICES,
    input="document_text",
    answer="decision",
    reason="parse_reason",
    extra=("parse_status", "gold", "is_correct", "finish_reason", "generation_key"),
)

#: metric → how its cells are traced.
TRACES = {
    **{
        f"M{i}": MetricTrace(
            "mr_violation_lineage",
            filter=f"mr{i}",
            cells="decision_lineage",
            **_COMMON,
            order=("workflow_id", "dataset", "instance_id", "repeat", "format"),
        )
        for i in (1, 2, 3)
    },
    "accuracy": MetricTrace(
        "decision_lineage",
        filter="gold IS NOT NULL",
        **_COMMON,
        order=("is_correct", "workflow_id", "dataset", "format", "instance_id", "repeat"),
    ),
}
