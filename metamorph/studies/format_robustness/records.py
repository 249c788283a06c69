"""The canonical intermediate representation C_x of a source record (paper §4.2).

A :class:`SourceInstance` is what every renderer receives: an ordered list of (field, value)
pairs, the task prompt P (kept *outside* the rendered document so it is identical across
formats — instruction isolation), the answer space, the gold label and the sensitive
attributes used by the fairness metrics.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Scalar",
    "SourceInstance",
    "canonical_text",
]

Scalar = str | int | float | bool | None


def canonical_text(value: Scalar) -> str:
    """The text form used to compare field values across formats (semantic invariance).

    ``None`` -> ``""``; booleans -> ``true``/``false``; integral floats keep their ``.0``;
    strings are returned unchanged. Raises ``TypeError`` for non-scalars and ``ValueError``
    for NaN/inf (they have no faithful rendering in every format).
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite value {value!r} cannot be rendered faithfully")
        return repr(value)
    if isinstance(value, str):
        return value
    raise TypeError(f"field values must be scalars, got {type(value).__name__}")


@dataclass(frozen=True)
class SourceInstance:
    """One record of a study dataset, format-free.

    Attributes:
        instance_id: unique within the dataset.
        dataset: dataset name (``medqa``, ``discrim_eval``, ``credit_default``, ``construct``...).
        fields: ordered (field, value) pairs; field names unique and non-empty.
        task_prompt: P, the instruction; never part of the rendered document.
        answer_space: the allowed decisions (>= 2 distinct labels).
        gold: the correct decision (an element of ``answer_space``) or ``None`` (no ground truth).
        favorable_label: the affirmative / favourable decision used for fairness rates, or ``None``.
        sensitive: sensitive attributes (``{"gender": "female", ...}``) for fairness metrics.
    """

    instance_id: str
    dataset: str
    fields: tuple[tuple[str, Scalar], ...]
    task_prompt: str
    answer_space: tuple[str, ...]
    gold: str | None = None
    favorable_label: str | None = None
    sensitive: dict[str, str] = field(default_factory=dict)

    def field_names(self) -> list[str]:
        return [k for k, _ in self.fields]

    def to_row(self) -> dict[str, Any]:
        """Flat row for the ``source_instances`` table (lists/dicts as JSON strings)."""
        return {
            "instance_id": self.instance_id,
            "dataset": self.dataset,
            "fields_json": json.dumps([[k, v] for k, v in self.fields], ensure_ascii=False),
            "task_prompt": self.task_prompt,
            "answer_space_json": json.dumps(list(self.answer_space), ensure_ascii=False),
            "gold": self.gold,
            "favorable_label": self.favorable_label,
            "sensitive_json": json.dumps(self.sensitive, ensure_ascii=False, sort_keys=True),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "SourceInstance":
        """Inverse of :meth:`to_row`."""
        gold = row.get("gold")
        fav = row.get("favorable_label")
        return cls(
            instance_id=str(row["instance_id"]),
            dataset=str(row["dataset"]),
            fields=tuple((str(k), v) for k, v in json.loads(row["fields_json"])),
            task_prompt=str(row["task_prompt"]),
            answer_space=tuple(json.loads(row["answer_space_json"])),
            gold=None if gold is None or (isinstance(gold, float) and math.isnan(gold)) else str(gold),
            favorable_label=None if fav is None or (isinstance(fav, float) and math.isnan(fav)) else str(fav),
            sensitive=json.loads(row["sensitive_json"]),
        )
