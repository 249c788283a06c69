"""Echoed evidence: an evidence item that copies the prompt's instructions instead of the document.

MR2 (paper §4.1) compares the *source-grounded* evidence of a workflow's replies ("key phrases
extracted from the input file", §5.1). A weak model often fills the evidence list with text of
the prompt itself — a phrase of the output instruction, the decision rule of the task prompt,
the answer labels. Such an item is **echoed**: it is counted, kept in ``extracted_decisions``
(``echoed_json``, ``n_echoed``), and excluded from the evidence sets that MR2, evidence drift and
the category mapping read (it would make two replies "agree" on evidence neither took from the
document).

Rule (:func:`is_echoed`), on normalised tokens (:func:`tokens`):

* ``overlap(item, text)`` = the share of the item's tokens (counted with repetition) that occur
  anywhere in ``text``;
* an item is echoed when ``overlap(item, instruction) >= ECHO_THRESHOLD`` (0.8) **and**
  ``overlap(item, record) < ECHO_THRESHOLD``: close to the instructions and not a quote of the
  record. The second clause keeps an item that both texts contain ("temperature_c 38.5" when the
  rule names ``temperature_c`` and the record's value is 38.5): it is grounded in the record;
* an item without tokens (only punctuation) is never echoed.

``instruction`` is everything the model was told besides the document
(:func:`metamorph.studies.format_robustness.plan.instruction_text`); ``record`` is the record's
field names and values (:func:`metamorph.studies.format_robustness.plan.record_text`), the same
for every format, so the rule cannot differ across formats.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

__all__ = ["ECHO_THRESHOLD", "is_echoed", "overlap", "split_echoed", "tokens"]

#: Share of an item's tokens found in the instructions from which the item is echoed.
ECHO_THRESHOLD = 0.8

# A decimal number ("38.5") is one token; otherwise a maximal run of letters, digits and "_".
_TOKEN_RE = re.compile(r"\d+(?:\.\d+)+|\w+")


def tokens(text: str) -> list[str]:
    """Normalised tokens of ``text``: NFKC, lower case, then maximal runs of letters, digits and
    underscores (Unicode ``\\w``), a decimal number such as ``38.5`` being one token.

    >>> tokens('<Short quote> from the "document": 38.5')
    ['short', 'quote', 'from', 'the', 'document', '38.5']
    """
    return _TOKEN_RE.findall(unicodedata.normalize("NFKC", text).lower())


def overlap(item: str, text: str | set[str]) -> float | None:
    """Share in [0, 1] of ``item``'s tokens (with repetition) that occur in ``text`` (a string or
    its token set); ``None`` when ``item`` has no token."""
    item_tokens = tokens(item)
    if not item_tokens:
        return None
    vocab = text if isinstance(text, set) else set(tokens(text))
    return sum(t in vocab for t in item_tokens) / len(item_tokens)


def is_echoed(
    item: str, instruction: str | set[str], record: str | set[str] = "", threshold: float = ECHO_THRESHOLD
) -> bool:
    """Whether ``item`` is echoed: ``overlap(item, instruction) >= threshold`` and
    ``overlap(item, record) < threshold`` (module docstring). Raises ``ValueError`` unless
    ``0 < threshold <= 1``."""
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    in_instruction = overlap(item, instruction)
    if in_instruction is None or in_instruction < threshold:
        return False
    return (overlap(item, record) or 0.0) < threshold


def split_echoed(
    items: Iterable[str], instruction: str, record: str = "", threshold: float = ECHO_THRESHOLD
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(evidence, echoed)``: ``items`` split by :func:`is_echoed`, each part in input order."""
    vocab_i, vocab_r = set(tokens(instruction)), set(tokens(record))
    kept: list[str] = []
    echoed: list[str] = []
    for item in items:
        (echoed if is_echoed(item, vocab_i, vocab_r, threshold) else kept).append(item)
    return tuple(kept), tuple(echoed)
