"""The document-format study's vocabulary, declared once ("Not as Sweet by Another Name", ASE '26).

Every other module of the study — renderers, extraction, metrics, mitigations, schemas' ``isin``
checks, asset config defaults, plots — refers to these names instead of spelling the lists again;
the SQL files that list formats are checked against :data:`FORMATS` by a test.

* :data:`FORMATS` — the paper's four formats, baseline first (§4.1): the default formats to render
  and the canonical order of every output (other registered formats sort after them);
* :data:`RELATIONS` — the metamorphic relations MR1 (decision), MR2 (evidence), MR3 (stability);
* :data:`PARSE_STATUSES` — the status of an extracted decision;
* :data:`MR_UNITS` — the unit of the MR flags;
* :data:`ROUTING_SELECTIONS`, :data:`ROUTING_CRITERIA`, :data:`MITIGATION_STRATEGIES` — format
  routing and the two mitigations (§5.5);
* :data:`FORMAT_TESTS` — the significance tests of the format effect.

The ``Literal`` types are the declarations; the tuples are read from them.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "BASELINE_FORMAT",
    "FORMATS",
    "FORMAT_TESTS",
    "TEST_BLOCKS",
    "MITIGATION_STRATEGIES",
    "MR_UNITS",
    "PARSE_STATUSES",
    "RELATIONS",
    "ROUTING_CRITERIA",
    "ROUTING_SELECTIONS",
    "ParseStatus",
    "Relation",
]

#: The paper's four formats, baseline first: sorting, routing ties, the default formats to render.
FORMATS: tuple[str, ...] = ("txt", "md", "json", "csv")

#: The baseline format (§4.1).
BASELINE_FORMAT = FORMATS[0]

#: A metamorphic relation: MR1 same decision, MR2 same evidence, MR3 stable repeats (§4.1).
Relation = Literal["MR1", "MR2", "MR3"]

#: The three metamorphic relations, in report order.
RELATIONS: tuple[str, ...] = get_args(Relation)

#: How a decision was read: as the contract asks, repaired, or not at all (⊥).
ParseStatus = Literal["ok", "repaired", "unparseable"]

#: The parse statuses of an extraction.
PARSE_STATUSES: tuple[str, ...] = get_args(ParseStatus)

#: Units of the MR flags: ``group`` (default, §5.2: every (instance, repeat) group) or the legacy
#: ``instance_repeat1`` (repeat 1 of each instance).
MR_UNITS: tuple[str, ...] = ("group", "instance_repeat1")

#: How format routing learns the best format: from every instance (the paper) or a calibration split.
ROUTING_SELECTIONS: tuple[str, ...] = ("all", "calibration")

#: Why routing chose its format: highest accuracy, highest stability (no gold), or the default.
ROUTING_CRITERIA: tuple[str, ...] = ("accuracy", "stability", "default")

#: The two mitigations (§5.5, Table 3): majority vote over repeats, routing to the best format.
MITIGATION_STRATEGIES: tuple[str, ...] = ("vote", "routing")

#: Significance tests of the format effect: Cochran's Q, McNemar per format pair, Spearman.
FORMAT_TESTS: tuple[str, ...] = ("cochran_q", "mcnemar", "spearman")

#: The blocks of a per-workflow test: (instance, repeat) groups for MR1/MR2, instances for MR3.
TEST_BLOCKS: tuple[str, ...] = ("group", "instance")
