"""Task-aware answer extraction for the prompt-wrapper study (FSI paper §3.5).

Every item has an ``answer_type``:

* ``choice`` — the answer is one of the item's labels: letters (``"A"`` .. ``"E"``) or option
  numbers (``"1"``, ``"2"`` for WinoGrande / PIQA);
* ``boolean`` — ``"true"`` or ``"false"``;
* ``numeric`` — a canonical decimal string: no sign for positives, no exponent, no thousands
  separators, no trailing zeros (``"18"``, ``"0.5"``, ``"-3"``; see :func:`canonical_number`).

Gold answers are in the same canonical form, so ``correct = parseable and value == gold``
(:meth:`QAExtraction.is_correct`).

The five prompt-wrapper families and the slot each one's output contract defines:

* ``plain`` — just the answer: the slot is the whole output (surrounding whitespace aside);
* ``json`` — a JSON object ``{"answer": <value>}`` (other keys allowed): the slot is its
  ``answer`` value (a JSON string, number or boolean);
* ``structured`` — a line ``Answer: <value>``: the slot is the rest of that line (other lines
  allowed);
* ``structured_delim`` — ``<answer>`` *value* ``</answer>``: the slot is the text between the tags;
* ``deliberate`` — scratchpad reasoning, then a final line ``Final answer: <value>``: the slot is
  the rest of that line. The scratchpad is never read in ``strict`` or ``normalized`` mode.

``family=None`` reads the output under the ``plain`` contract.

Four modes. ``paper`` (the default, :data:`DEFAULT_MODE`, the headline FSI / PSI) is the
paper's extractor as the review reports §3.5 — first choice letter, a boolean map, the last
number — read inside the family's slot, and reading a truncated reply when its answer is visible;
every rule is in :mod:`metamorph.studies.wrapper_sensitivity.paper`. The three reported
variants (paper appendix B strict / normalized, plus lenient) differ only in how much of the
contract they require:

* ``strict`` — the family's contract exactly: the whole output must parse as one JSON object
  with the key ``answer``; the ``Answer:`` / ``Final answer:`` key is spelled exactly so at the start of its
  line, and for ``deliberate`` that line is the last non-empty line; the tags are exactly
  ``<answer>`` / ``</answer>``. The committed value is exactly a label (as given), ``true`` /
  ``false`` (or a JSON boolean), or a plain ASCII number ``-?[0-9]+(\\.[0-9]+)?`` (or a JSON
  number). A plain number is still canonicalised: ``"18.0"`` is ``"18"`` in every mode.
* ``normalized`` — the same contract after normalisation. The slot: key case and markdown
  (``answer: B``, ``**Answer:** B``), a value on the line after a bare key, tag case and spacing
  (``<ANSWER>``, ``< answer >``), a ``Final answer:`` line that is not the last line, JSON in
  code fences (found with the shared :func:`metamorph.jsonscan.fence_bodies`: a fence inside a
  JSON string value does not end the fenced object) or surrounded by prose, JSON key case. The value (repeatedly, in any order):
  Unicode NFKC (fullwidth ``１８`` -> ``18``), case, surrounding whitespace, markdown emphasis
  (``**B**``, ``_B_``, `` `B` ``), LaTeX (``\\boxed{18}``, ``\\text{B}``, ``$18$``, ``\\(18\\)``),
  one level of parentheses / brackets / braces / quotes (``(B)``, ``[B]``), a lone closing
  parenthesis (``B)``), an ``Option`` / ``Choice`` prefix (``Option B``), trailing punctuation
  ``. , ; : !``; for booleans ``yes`` / ``no`` -> ``true`` / ``false``; for numbers a currency
  symbol ($, €, £, ¥; before or after), thousands separators (``1,234``, LaTeX ``1{,}234``,
  ``1\\,234``), Unicode minus (``−5``), a leading ``+``, a trailing unit of up to four words or
  ``%`` (``18 dollars``, ``18 km/h``, ``18kg``, ``50%`` -> ``50``; scale words such as
  *thousand* / *million* / *k* / *half* are not units, so ``18 million`` is not ``18``).
  The option *text* is never matched: the extractor gets the labels only, so ``B. Paris`` (which
  might contradict option B's text) is not a normalisation; it is read in ``lenient`` mode.
* ``lenient`` — ``normalized`` first; when the contract's slot is **missing**, the whole output
  is searched: a committed label in explicit patterns (``the answer is C``, ``Answer: (C)``,
  ``Option C``, ``\\boxed{C}``, a line that is just ``C`` / ``**C**`` / ``(C)``), a boolean in the
  same patterns or else a boolean word (``yes`` / ``no`` / ``true`` / ``false`` that is neither
  negated — ``not true`` — nor a modifier — ``no evidence``, ``false positive``), a number in
  the same patterns or else the LAST number of the text. A Python-literal object
  (``{'answer': 'B'}``) counts as the JSON slot; an unclosed ``<answer>`` tag counts as the delim
  slot (its rest of text). When the slot is **present** but its value does not normalise, only
  the slot is searched (the same patterns, plus a label at the start of the slot — ``B. Paris``,
  ``C) because ...`` — or a parenthesised label in it — ``Paris (B)``); a committed but
  unreadable slot is never overridden by the scratchpad. The ``plain`` slot is the whole output,
  so lenient ``plain`` searches the whole output with these slot rules. Before any search, LaTeX
  math / text marks around a short token are removed (``$B$``, ``\\(B\\)``, ``\\[B\\]``,
  ``\\textbf{D}``, ``\\text{D}``, nested ``\\(\\textbf{B}\\)``; ``\\boxed{}`` stays an answer pattern)
  and LaTeX number spacing is undone (``9{,}500``, ``1\\,234``). For choices an explicit answer
  pattern wins over labels merely mentioned (label lines, labels in the slot): ``Not (A).
  Answer: D`` is D; and a label the text rejects right before it (``not (A)``, ``isn't B``,
  ``rather than C``, ``instead of``, ``except``) is never a hit.

Rules common to every mode:

* **An unparseable answer never becomes a value**: ``value is None`` exactly when
  ``parseable`` is false, and it then counts as incorrect (in the denominator, never in the
  numerator).
* ``finish_reason == "length"`` (also ``max_tokens`` / ``max_output_tokens``) is ``truncated``
  in ``strict`` / ``normalized`` / ``lenient``, before anything is read — **even when a complete ``Final answer:`` line came
  before the cut**: the output is incomplete (the review notes max_tokens=24 cuts the deliberate
  wrapper), so it is reported, never guessed; ``paper`` reads a cut reply only when its answer
  is visible before the cut (:mod:`.paper`). Empty or ``None`` text is ``empty`` (``truncated``
  when it was cut).
* Two different committed answers (two slots — a JSON object giving ``answer`` twice is two — two
  explicit patterns, two boolean words) are
  ``ambiguous`` (``paper``: only two slots; inside one scope its rule takes the first label /
  boolean word, the last number); a wider mode never resolves an ambiguity. Parseability is monotone
  (strict ⊆ normalized ⊆ lenient) except that normalisation can reveal a second, conflicting slot
  (``Answer: B`` plus ``answer: C`` is ``ok`` in strict and ``ambiguous`` in normalized).
  Several slots with the same value, or with one readable value and unreadable others, are fine.
* A letter is never taken out of a word (``Apple``), and ``A`` / ``I`` / a lower-case letter
  not in brackets only counts when nothing word-like follows (``A 43-year-old man`` is not A;
  ``the answer is A.`` / ``A because ...`` are). A label followed by *is incorrect* / *not* /
  *wrong* is not asserted (``Option A is incorrect``); a verb-less mention only counts when the
  label ends the clause or *is* / *because* follows (``Option C describes ...`` is no answer,
  ``Option C.`` / ``Option C is correct`` are). ``B or C`` / ``B/C`` / ``B and C`` is
  ``ambiguous``. Numbers and booleans need ``answer is`` / ``answer:`` before them. An option
  number is never taken out of a larger number or a decimal (``12`` is neither ``1`` nor ``2``;
  ``1.5`` is not ``1``).
* Numbers in free text (lenient search) are never read out of an identifier or a compound:
  a number glued to a letter, ``_``, ``#``, ``@`` or ``^`` (``A1``, ``x_2``, ``#12``, ``12B``,
  ``COVID-19``, ``v2.0``, ``x^2``, ordinals ``3rd``) or joined to another number by ``/ : - .``
  (fractions, ratios, times, dates, ranges, versions: ``1/2``, ``3:4``, ``2024-01-05``,
  ``3-5``, ``1.2.3``) is skipped; LaTeX ``\\frac{..}{..}`` is skipped. Glued units are numbers
  (``18kg``, ``18%``, ``18-year-old``). Only ASCII letters and digits count as glue, so CJK text
  around a number does not hide it (``合計は１８個`` reads 18). A ``-`` after a digit or a closing
  bracket is a subtraction, not a sign (``18 - 2`` ends in 2, not -2).
* Fractions are not numbers here (gold is a decimal string): ``1/2`` and ``\\frac{1}{2}`` are
  ``not_a_number`` in every mode.
* A slot value longer than 1000 characters is never normalised (no label or number is that long);
  every search is linear in the output length.

Labels given with a non-choice ``answer_type`` are ignored.

Reason codes (exactly one per extraction; :data:`PARSEABLE_REASONS`, :data:`UNPARSEABLE_REASONS`).
Parseable, where the slot was found winning over how the value was normalised:

* ``ok`` — the strict contract holds (returned by every mode for such an output);
* ``json_in_code_fence`` / ``json_in_prose`` — the JSON object was inside ``` fences / prose;
* ``normalized_slot`` — the slot itself needed normalisation (key/tag case or markdown, value on
  the next line, ``Final answer:`` not on the last line, JSON key case);
* ``normalized_markup`` — the value needed case / whitespace / markdown / LaTeX / bracket /
  ``Option`` / punctuation normalisation;
* ``normalized_number`` — currency, separators, Unicode minus or digits, ``+``, a unit;
* ``normalized_yes_no`` — ``yes`` / ``no`` read as ``true`` / ``false``;
* ``lenient_json_repaired`` — the JSON slot came from a Python-literal object;
* ``lenient_unclosed_tag`` — the delim slot came from an unclosed ``<answer>`` tag;
* ``lenient_answer_phrase`` — an explicit pattern (``the answer is``, ``Answer:``, ``Option``,
  ``\\boxed{}``);
* ``lenient_label_line`` — a line that is just a label;
* ``lenient_label_in_slot`` — a label at the start of / in brackets inside the slot;
* ``lenient_boolean_word`` — the one boolean word of the text;
* ``lenient_last_number`` — the last number of the text (or of the slot);
* ``paper_first_label`` / ``paper_boolean_word`` / ``paper_last_number`` — mode ``paper``: the
  task-aware rule read the slot (first label, first boolean word, last number);
* ``paper_answer_phrase`` — mode ``paper``, a cut reply: the number after an explicit answer
  pattern;
* ``paper_cut_slot`` — mode ``paper``: the value came from a slot cut by the token limit (an
  unclosed ``<answer>`` tag, a JSON object cut after its ``answer`` value).

Unparseable: ``truncated``, ``empty``, ``no_answer`` (no slot), ``invalid_json`` (json family:
no JSON object parses), ``not_a_label`` / ``not_a_boolean`` / ``not_a_number`` (a slot whose
value cannot be read in this mode), ``ambiguous``. When the lenient search (or the ``paper``
rule on a complete reply) finds nothing, the ``normalized`` reason is kept; a cut reply whose
answer is not visible is ``truncated`` in every mode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from metamorph.errors import ConfigError
from metamorph.studies.wrapper_sensitivity.answers import answer_spec, canonical_number
from metamorph.studies.wrapper_sensitivity.lenient import lenient_extract
from metamorph.studies.wrapper_sensitivity.paper import paper_extract
from metamorph.studies.wrapper_sensitivity.slots import QAExtraction, read_slots, unparseable
from metamorph.studies.wrapper_sensitivity.vocab import (
    ANSWER_TYPES,
    DEFAULT_MODE,
    FAMILIES,
    MODES,
    PARSEABLE_REASONS,
    UNPARSEABLE_REASONS,
    AnswerType,
    Family,
    Mode,
)

__all__ = [
    "ANSWER_TYPES",
    "DEFAULT_MODE",
    "FAMILIES",
    "MODES",
    "PARSEABLE_REASONS",
    "UNPARSEABLE_REASONS",
    "AnswerType",
    "Family",
    "Mode",
    "QAExtraction",
    "canonical_number",
    "extract_answer",
]

#: Finish reasons that mean the output was cut by the token limit.
_TRUNCATED_FINISH = frozenset({"length", "max_tokens", "max_output_tokens"})


def extract_answer(
    text: str | None,
    answer_type: AnswerType,
    labels: Sequence[str] = (),
    family: Family | None = None,
    mode: Mode = DEFAULT_MODE,
    finish_reason: str | None = None,
) -> QAExtraction:
    """Read the answer of one model output; see the module docstring for every rule.

    Args:
        text: the completion (``None`` — or a float NaN from a table — for a call that returned
            no text).
        answer_type: ``choice``, ``boolean`` or ``numeric``.
        labels: the choice labels (letters or option numbers), returned spelled as given;
            ignored for the other answer types.
        family: the prompt-wrapper family whose output contract is read (``None``: ``plain``).
        mode: ``paper`` (default: the paper's extractor, :mod:`.paper`), ``strict``,
            ``normalized`` or ``lenient``.
        finish_reason: the provider's normalised finish reason; ``"length"`` -> ``truncated``
            (in ``paper`` mode: read when the answer is visible before the cut).

    Raises:
        ConfigError: unknown answer type, family or mode; choice labels that are fewer than two,
            not all single letters / all option numbers, or not distinct up to case.
    """
    spec = answer_spec(answer_type, labels)
    fam = "plain" if family is None else family
    if fam not in FAMILIES:
        raise ConfigError(f"family must be one of {FAMILIES} or None, got {family!r}")
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
    truncated = finish_reason is not None and str(finish_reason).strip().lower() in _TRUNCATED_FINISH
    if truncated and mode != "paper":
        return unparseable("truncated")
    if text is None or (isinstance(text, float) and math.isnan(text)) or not str(text).strip():
        # None, a pandas NaN for a missing text, or only whitespace
        return unparseable("truncated" if truncated else "empty")
    text = str(text)
    if mode == "paper":
        return paper_extract(text, fam, spec, truncated)
    if mode == "strict":
        return read_slots(text, fam, spec, strict=True)
    normalized = read_slots(text, fam, spec, strict=False)
    if mode == "normalized" or normalized.parseable or normalized.reason == "ambiguous":
        return normalized
    return lenient_extract(text, fam, spec, normalized)
