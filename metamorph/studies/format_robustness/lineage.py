"""How ``metamorph trace`` reads this study's metric cells (:mod:`metamorph.trace`; views in
``sql/format_robustness/lineage_views.sql``).

* ``M1`` / ``M2`` / ``M3``: the generations of the (instance, repeat) groups violating MR1 / MR2 /
  MR3 — every format of the group (view ``mr_violation_lineage``; the models and slices are those
  of ``decision_lineage``, so a model with no violating group has 0 rows behind its cell);
* ``accuracy``: every generation with a gold label whose call did not fail, wrong ones first
  (``decision_lineage``);
* ``silent``: the generations of the groups violating MR2 but not MR1 (silent violations; view
  ``mr_violation_lineage``);
* ``stability``: the generations of the instances whose k repeats disagree in a format (Stb_f's
  unstable instances; view ``stability_lineage``);
* ``flip``: the generations in a format other than TXT whose decision differs from the TXT one of
  their (instance, repeat) group (evidence drift's flip rate; view ``flip_lineage``, with the TXT
  decision and raw reply next to each).

``--model`` is the registry id (``model_id``; a cell's ``workflow_id`` is ``<model id>/<ingestion>``).
Slices: workflow_id, dataset, format, repeat, instance_id. Rendered input: the document; answer:
the extracted decision; parse reason: ``parse_reason`` (``call_error`` for a failed call, or a
request that was not sent). Every row also says how the document was sent (``sent:``: the file
name, media type and sha256 a file path sent; the extraction and file an inline model's text came
from; or why it was not sent) and, when the model read a binary file's extracted text inline, or a
workflow under test reported the text it extracted from its upload (its entry's
``extracted_pointer``), prints that text whole beside the raw reply (``extracted_text``).
"""

from __future__ import annotations

from metamorph.trace import MetricTrace

__all__ = [
    "TRACES",
]

_SLICES = {k: k for k in ("workflow_id", "dataset", "format", "repeat", "instance_id")}

#: How the document reached the model: not sent (the path cannot take its format); inline, as the
#: text a named extraction read from the file, or as the document's own text; or as a file, with
#: the name, media type and sha256 the path sent.
_SENT = """CASE
    WHEN starts_with(coalesce(error, ''), 'not sent: ') THEN error
    WHEN ingestion = 'inline' AND extraction IS NOT NULL
        THEN 'inline: the text ' || extraction || ' extracted from ' || filename || ' (' || media_type
             || ', sha256 ' || document_sha256 || ')'
    WHEN ingestion = 'inline' THEN 'inline: the document text in the message (' || media_type || ')'
    ELSE ingestion || ': the file ' || filename || ' (' || media_type || ', sha256 ' || document_sha256 || ')'
END"""

_COMMON = dict(
    model="model_id",
    id="instance_id",
    slices=_SLICES,
    input="document_text",
    answer="decision",
    reason="parse_reason",
    extra=("parse_status", "gold", "is_correct", "finish_reason", "generation_key"),
    sent=_SENT,
    extracted="CASE WHEN ingestion = 'inline' AND extraction IS NOT NULL THEN document_text "
    "WHEN ingestion = 'upload' THEN extracted_text END",
    requires=(
        "ingestion",
        "extraction",
        "filename",
        "media_type",
        "document_sha256",
        "error",
        "document_text",
        "extracted_text",
    ),
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
    "silent": MetricTrace(
        "mr_violation_lineage",
        filter="mr2 AND NOT mr1",
        cells="decision_lineage",
        **_COMMON,
        order=("workflow_id", "dataset", "instance_id", "repeat", "format"),
    ),
    "stability": MetricTrace(
        "stability_lineage",
        filter="NOT stable",
        cells="decision_lineage",
        **_COMMON,
        order=("workflow_id", "dataset", "format", "instance_id", "repeat"),
    ),
    "flip": MetricTrace(
        "flip_lineage",
        filter="flipped",
        cells="decision_lineage",
        **{**_COMMON, "extra": (*_COMMON["extra"], "baseline_decision", "baseline_response_text")},
        order=("workflow_id", "dataset", "format", "instance_id", "repeat"),
    ),
    "accuracy": MetricTrace(
        "decision_lineage",
        filter="gold IS NOT NULL AND parse_reason IS DISTINCT FROM 'call_error'",
        **_COMMON,
        order=("is_correct", "workflow_id", "dataset", "format", "instance_id", "repeat"),
    ),
}
