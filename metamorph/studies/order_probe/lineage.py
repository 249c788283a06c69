"""How ``metamorph trace`` reads this study's recovery cells (:mod:`metamorph.trace`; views in
``sql/order_probe/lineage_views.sql``).

* ``recovery``: the scrambled inputs behind a recovery_rates cell (model × language × setting;
  language ``all`` pools the languages and is the default), unrecovered first (view
  ``recovery_cell_lineage``).

Slices: language, setting, pattern, item_id. Rendered input: the prompt's messages; answer: the
parsed expression (null when the parse failed); parse reason: ``reason``.
"""

from __future__ import annotations

from metamorph.studies.order_probe.vocab import POOLED_LANGUAGE
from metamorph.trace import MetricTrace

__all__ = [
    "TRACES",
]

#: metric → how its cells are traced.
TRACES = {
    "recovery": MetricTrace(
        "recovery_cell_lineage",
        model="model_id",
        id="item_id",
        slices={"language": "cell_language", "setting": "setting", "pattern": "pattern", "item_id": "item_id"},
        input="messages_json",
        answer="expression",
        reason="reason",
        defaults={"language": POOLED_LANGUAGE},
        order=("correct", "setting", "language", "item_id", "pattern"),
        extra=("language", "scrambled", "canonical", "correct", "finish_reason", "generation_key"),
    )
}
