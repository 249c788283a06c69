"""Lexical metrics: BLEU and GLEU (App. B.3).

Default (``tokenization="document"``, App. B.3): a workflow's steps are joined with single spaces,
in order, into one document, tokenised as ``nltk.word_tokenize`` does — split into sentences,
then ``NLTKWordTokenizer`` (the Treebank tokenizer ``word_tokenize`` uses) on each — and **not**
lower-cased. ``word_tokenize`` needs NLTK's punkt English model, which cannot be installed here;
``word_tokenize(..., preserve_line=True)`` skips the sentence split and so keeps a mid-text
sentence-final period on its word (``"water."``). The sentence split is therefore done with
nltk's own :class:`nltk.tokenize.punkt.PunktSentenceTokenizer` with default (untrained)
parameters: the same algorithm, without the English model's learnt abbreviation list — it splits
after ``"Dr."`` or ``"No."`` where the English model would not, and like it keeps ``"1.5"`` and
single-letter initials (``"l."``) together. ``"Fill the pot with water. Boil it."`` →
``Fill the pot with water . Boil it .``.

BLEU = ``sentence_bleu([gold_tokens], pred_tokens, smoothing_function=SmoothingFunction().method1)``
with uniform weights up to 4-grams; GLEU = ``sentence_gleu([gold_tokens], pred_tokens)``.
**Short goldens**: nltk's BLEU-4 of an identical text of fewer than 4 tokens is < 1 (0.5623 for 3
tokens; no 4-gram exists), so a gate would flag an identical candidate of a 3-token golden. When
the gold has ``k < 4`` tokens the n-gram order is lowered to ``k`` (uniform weights 1/k; recorded
as ``max_order``). GLEU needs no such rule (identical → 1.0).

``tokenization="per_step"`` (the earlier rule): each step tokenised on its own with
``NLTKWordTokenizer`` (lower-cased when ``lowercase=True``), token lists concatenated.

source: App. B.3.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import lru_cache

__all__ = [
    "BLEU_MAX_ORDER",
    "TOKENIZATIONS",
    "bleu",
    "bleu_max_order",
    "gleu",
    "lexical_tokens",
    "sentences",
    "word_tokens",
]

#: Tokenisation variants (the first is the default; module docstring).
TOKENIZATIONS = ("document", "per_step")
#: BLEU's n-gram order (lowered for shorter goldens).
BLEU_MAX_ORDER = 4

_TOKENIZER = None
_SENTENCES = None


def _tools():
    global _TOKENIZER, _SENTENCES
    if _TOKENIZER is None:
        from nltk.tokenize import NLTKWordTokenizer
        from nltk.tokenize.punkt import PunktSentenceTokenizer

        _TOKENIZER = NLTKWordTokenizer()
        _SENTENCES = PunktSentenceTokenizer()
    return _TOKENIZER, _SENTENCES


def sentences(text: str) -> list[str]:
    """Punkt sentence split with default parameters (module docstring)."""
    return _tools()[1].tokenize(text)


def word_tokens(text: str) -> list[str]:
    """``nltk.word_tokenize(text)`` without the punkt English model: :func:`sentences`, then
    ``NLTKWordTokenizer`` on each sentence. ``"Fill the pot with water. Boil it."`` →
    ``['Fill', 'the', 'pot', 'with', 'water', '.', 'Boil', 'it', '.']``."""
    tok, _ = _tools()
    return [t for s in sentences(text) for t in tok.tokenize(s)]


def lexical_tokens(steps: Sequence[str] | str, lowercase: bool = False, tokenization: str = "document") -> list[str]:
    """Tokens of a workflow's steps (module docstring): the whitespace-joined document through
    :func:`word_tokens` (default), or each step through ``NLTKWordTokenizer`` (``per_step``);
    NFC-normalised first (a composed and a decomposed "café" are one token); lower-cased only
    when ``lowercase``. Raises ``ValueError`` for an unknown tokenization."""
    if tokenization not in TOKENIZATIONS:
        raise ValueError(f"tokenization must be one of {TOKENIZATIONS}, not {tokenization!r}")
    return list(_cached_tokens((steps,) if isinstance(steps, str) else tuple(steps), lowercase, tokenization))


@lru_cache(maxsize=8192)
def _cached_tokens(steps: tuple[str, ...], lowercase: bool, tokenization: str) -> tuple[str, ...]:
    # a golden's steps are tokenized once for all its variants and for both BLEU and GLEU
    steps = tuple(unicodedata.normalize("NFC", s) for s in steps)  # text, not code points
    steps = tuple(s.lower() if lowercase else s for s in steps)
    if tokenization == "document":
        return tuple(word_tokens(" ".join(steps)))
    tok, _ = _tools()
    return tuple(t for s in steps for t in tok.tokenize(s))


def _has_content(tokens: Sequence[str]) -> bool:
    return any(any(ch.isalnum() for ch in t) for t in tokens)


def bleu_max_order(n_gold_tokens: int) -> int:
    """BLEU's n-gram order for a gold of ``n_gold_tokens`` tokens: ``min(4, n)`` (at least 1)."""
    return max(1, min(BLEU_MAX_ORDER, n_gold_tokens))


def _lexical(kind: str, gold_steps, pred_steps, lowercase: bool, tokenization: str) -> tuple[float | None, str | None]:
    ref = lexical_tokens(gold_steps, lowercase, tokenization)
    hyp = lexical_tokens(pred_steps, lowercase, tokenization)
    if not _has_content(ref):
        return None, "gold_without_tokens"
    if not hyp:
        return 0.0, "empty_candidate"
    if not _has_content(hyp):
        return 0.0, "candidate_without_tokens"
    if kind == "bleu":
        from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

        k = bleu_max_order(len(ref))
        return float(
            sentence_bleu([ref], hyp, weights=tuple([1.0 / k] * k), smoothing_function=SmoothingFunction().method1)
        ), None
    from nltk.translate.gleu_score import sentence_gleu

    return float(sentence_gleu([ref], hyp)), None


def bleu(
    gold_steps: Sequence[str] | str,
    pred_steps: Sequence[str] | str,
    lowercase: bool = False,
    tokenization: str = "document",
) -> tuple[float | None, str | None]:
    """Sentence BLEU (method1 smoothing, order :func:`bleu_max_order`) of the candidate's tokens
    against the gold's; ``(score in [0, 1], None)`` or ``(0.0 / None, reason)``:
    ``gold_without_tokens`` (None), ``empty_candidate`` / ``candidate_without_tokens`` (0.0).
    source: App. B.3."""
    return _lexical("bleu", gold_steps, pred_steps, lowercase, tokenization)


def gleu(
    gold_steps: Sequence[str] | str,
    pred_steps: Sequence[str] | str,
    lowercase: bool = False,
    tokenization: str = "document",
) -> tuple[float | None, str | None]:
    """Sentence GLEU (1..4-grams) of the candidate's tokens against the gold's; ``(score, reason)``
    as :func:`bleu`. source: App. B.3."""
    return _lexical("gleu", gold_steps, pred_steps, lowercase, tokenization)
