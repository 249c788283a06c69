"""How ``metamorph trace`` reads this study's metric cells (:mod:`metamorph.trace`; views in
``sql/wrapper_sensitivity/lineage_views.sql``).

* ``accuracy``: the answers of a model × task × wrapper × mode cell, wrong ones first (view
  ``cell_lineage``);
* ``FSI`` / ``PSI``: the answers of the most and the least accurate / parseable wrapper(s) of a
  model × task × mode over the five standard wrappers (``spread_lineage``, slice ``role`` =
  best / worst; every tied wrapper is listed).

Slices: task, wrapper, mode (default ``paper``, the headline extractor), item_id, seed (and role).
Rendered input: the wrapped prompt's messages (the request's, for the json_constrained arm);
answer: the extracted value (null when unparseable); parse reason: ``reason``.
"""

from __future__ import annotations

from metamorph.studies.wrapper_sensitivity.vocab import DEFAULT_MODE, HEADLINE_INDICES
from metamorph.trace import MetricTrace

__all__ = ["TRACES"]

_SLICES = {k: k for k in ("task", "wrapper", "mode", "item_id", "seed")}
_COMMON = dict(
    model="model_id",
    id="item_id",
    input="coalesce(messages_json, request_json)",
    answer="value",
    reason="reason",
    defaults={"mode": DEFAULT_MODE},
    extra=("gold", "correct", "parseable", "finish_reason", "generation_key"),
)

#: metric → how its cells are traced.
TRACES = {
    "accuracy": MetricTrace(
        "cell_lineage", slices=_SLICES, **_COMMON, order=("correct", "task", "wrapper", "item_id", "seed")
    ),
    **{
        m: MetricTrace(
            "spread_lineage",
            slices={**_SLICES, "role": "role"},
            filter=f"metric = '{m}'",
            **_COMMON,
            order=("task", "role", "wrapper", "correct" if m == "FSI" else "parseable", "item_id", "seed"),
        )
        for m in HEADLINE_INDICES
    },
}
