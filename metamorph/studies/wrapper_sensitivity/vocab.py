"""The wrapper-sensitivity study's vocabulary, declared once (FSI paper, arXiv 2607.09665).

Every other module of the study — wrappers, extraction, plan, metrics, schemas' ``isin`` checks,
reports, asset config defaults — refers to these names instead of spelling the lists again:

* :data:`FAMILIES` — the five wrapper families (§3.2), in report order; :data:`WRAPPERS` adds the
  constrained-decoding arm :data:`CONSTRAINED_ARM` (the review's falsifier);
* :data:`MODES` — the extraction modes (§3.5 and appendix B), :data:`DEFAULT_MODE` the headline;
* :data:`ANSWER_TYPES` — the answer types of a QA item;
* :data:`PARSEABLE_REASONS` / :data:`UNPARSEABLE_REASONS` — the reason codes of an extraction
  (:mod:`metamorph.studies.wrapper_sensitivity.extract` explains each);
* :data:`INDICES` — the per-task indices averaged by ``mean_indices`` (§4), with their column and
  unit; :data:`INDEX_NAMES`, :data:`INDEX_UNITS` and :data:`HEADLINE_INDICES` derive from it.

The ``Literal`` types are the declarations; the tuples are read from them, so the two cannot
disagree.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "ANSWER_TYPES",
    "CONSTRAINED_ARM",
    "DEFAULT_MODE",
    "FAMILIES",
    "HEADLINE_INDICES",
    "INDEX_NAMES",
    "INDEX_UNITS",
    "INDICES",
    "MODES",
    "PARSEABLE_REASONS",
    "UNPARSEABLE_REASONS",
    "WRAPPERS",
    "CORRELATION_SCOPES",
    "AnswerType",
    "Family",
    "Mode",
]

#: A prompt-wrapper family (§3.2).
Family = Literal["plain", "json", "structured", "structured_delim", "deliberate"]

#: The five wrapper families, in report order: sorting, tie-breaking, and the reference level
#: (``plain``) of the regressions.
FAMILIES: tuple[str, ...] = get_args(Family)

#: The constrained-decoding arm: the ``json`` prompts sent again with a JSON schema enforced by
#: the provider; read with the ``json`` family's contract.
CONSTRAINED_ARM = "json_constrained"

#: Every value of a ``wrapper`` column: the five families and the constrained arm.
WRAPPERS: tuple[str, ...] = (*FAMILIES, CONSTRAINED_ARM)

#: An extraction mode: the paper's extractor (the headline) and the three reported variants.
Mode = Literal["paper", "strict", "normalized", "lenient"]

#: Extraction modes: the paper's extractor (§3.5 as the review reports it, :data:`DEFAULT_MODE`)
#: and the reported variants (appendix B strict / normalized, plus lenient).
MODES: tuple[str, ...] = get_args(Mode)

#: The mode of the headline FSI / PSI: the paper's extractor (§3.5).
DEFAULT_MODE: Mode = "paper"

#: The answer type of a QA item: an option label, ``true`` / ``false``, or a canonical number.
AnswerType = Literal["choice", "boolean", "numeric"]

#: The three answer types of the study.
ANSWER_TYPES: tuple[str, ...] = get_args(AnswerType)

#: Reasons of a parseable extraction.
PARSEABLE_REASONS: tuple[str, ...] = (
    "ok",
    "json_in_code_fence",
    "json_in_prose",
    "normalized_slot",
    "normalized_markup",
    "normalized_number",
    "normalized_yes_no",
    "lenient_json_repaired",
    "lenient_unclosed_tag",
    "lenient_answer_phrase",
    "lenient_label_line",
    "lenient_label_in_slot",
    "lenient_boolean_word",
    "lenient_last_number",
    "paper_first_label",
    "paper_boolean_word",
    "paper_last_number",
    "paper_answer_phrase",
    "paper_cut_slot",
)

#: Reasons of an unparseable extraction.
UNPARSEABLE_REASONS: tuple[str, ...] = (
    "truncated",
    "empty",
    "no_answer",
    "invalid_json",
    "not_a_label",
    "not_a_boolean",
    "not_a_number",
    "ambiguous",
)

#: The per-task indices averaged over tasks (§4): ``(index, column of the FSI table, unit)``.
#: FSI and PSI appear twice: in percentage points and as fractions like the paper.
INDICES: tuple[tuple[str, str, str], ...] = (
    ("FSI", "fsi_pp", "pp"),
    ("PSI", "psi_pp", "pp"),
    ("nFSI", "nfsi", "ratio"),
    ("nFSI_chance", "nfsi_chance", "ratio"),
    ("FSI_fraction", "fsi", "fraction"),
    ("PSI_fraction", "psi", "fraction"),
)

#: Scopes of the accuracy–parseability correlation (§5): every cell pooled, or one model's cells.
CORRELATION_SCOPES: tuple[str, ...] = ("pooled", "model")

#: Index names, in :data:`INDICES` order.
INDEX_NAMES: tuple[str, ...] = tuple(name for name, _, _ in INDICES)

#: Units of the averaged indices: percentage points, unitless ratio, fraction 0–1.
INDEX_UNITS: tuple[str, ...] = tuple(dict.fromkeys(unit for _, _, unit in INDICES))

#: The two headline indices (percentage points): format sensitivity and parse sensitivity.
HEADLINE_INDICES: tuple[str, ...] = INDEX_NAMES[:2]
