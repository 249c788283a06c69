"""OrderProbe's vocabulary, declared once ("How Order-Sensitive Are LLMs? OrderProbe for
Deterministic Structural Reconstruction", 2026).

Every other module of the study — sources, plan, extraction, metrics, schemas' ``isin`` checks,
lineage and report — refers to these names instead of spelling the lists again; the SQL views are
checked against them by a test.

* :data:`LANGUAGES` — the four languages (:data:`CHINESE` the two Chinese ones); :data:`SPACELESS` those written without spaces between
  words; :data:`POOLED_LANGUAGE` the label of a row pooling every language;
* :data:`STRUCTURES` — the release's syntactic structure labels;
* :data:`SETTINGS` — the prompt settings;
* :data:`INPUT_KINDS` — a scrambled order or the unperturbed run; :data:`ITEM_STATUSES` — whether
  a scrambled input is sent;
* :data:`PARSE_REASONS` — the outcome of the four-unit parser;
* :data:`BREAKDOWN_DIMENSIONS` and :data:`FREQUENCY_BINS` — the recovery breakdown.
"""

from __future__ import annotations

__all__ = [
    "BREAKDOWN_DIMENSIONS",
    "CHINESE",
    "FREQUENCY_BINS",
    "INPUT_KINDS",
    "ITEM_STATUSES",
    "LANGUAGES",
    "PARSE_REASONS",
    "POOLED_LANGUAGE",
    "SETTINGS",
    "SPACELESS",
    "STRUCTURES",
]

#: The Chinese languages: Simplified and Traditional chengyu (every unit a CJK ideograph).
CHINESE: tuple[str, ...] = ("zh_cn", "zh_tw")

#: The languages: Chinese chengyu, Japanese yojijukugo, Korean sajaseong-eo.
LANGUAGES: tuple[str, ...] = (*CHINESE, "ja", "ko")

#: Languages whose script writes no spaces between words (whitespace between single units is layout).
SPACELESS: tuple[str, ...] = (*CHINESE, "ja")

#: The ``language`` of a row that pools every language.
POOLED_LANGUAGE = "all"

#: The release's syntactic structure labels of an expression.
STRUCTURES: tuple[str, ...] = (
    "Subject-Predicate",
    "Verb-Object",
    "Parallel (Coordinate)",
    "Modifier-Head",
    "Serial Verb",
    "Complementary",
)

#: Prompt settings: zero-shot, chain-of-thought, few-shot.
SETTINGS: tuple[str, ...] = ("zero_shot", "cot", "few_shot")

#: What a model was shown: one of the 23 scrambled orders, or the expression itself.
INPUT_KINDS: tuple[str, ...] = ("scrambled", "unperturbed")

#: Status of a scrambled input: sent and scored, dropped because it equals the canonical order,
#: or dropped as a duplicate of an earlier pattern of the item.
ITEM_STATUSES: tuple[str, ...] = ("scored", "equals_canonical", "duplicate")

#: Outcomes of the four-unit parser (``ok`` = one candidate expression found).
PARSE_REASONS: tuple[str, ...] = ("ok", "empty_reply", "no_candidate", "several_candidates", "malformed")

#: Dimensions of the recovery breakdown.
BREAKDOWN_DIMENSIONS: tuple[str, ...] = ("pattern", "structure", "frequency_bin", "kept_adjacent")

#: Corpus-frequency terciles within a language, most frequent first.
FREQUENCY_BINS: tuple[str, ...] = ("high", "mid", "low")
