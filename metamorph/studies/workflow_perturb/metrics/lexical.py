"""Lexical metrics: BLEU and GLEU (App. B.3).

Tokens: each step is lower-cased (``lowercase=True``, the default: capitalisation of a step's
first word is not content) and tokenised with ``nltk.tokenize.NLTKWordTokenizer`` (needs no
NLTK data); the step token lists are concatenated in order. This equals tokenising the
whitespace-joined text except that each step's sentence-final period is split off (the
tokenizer only splits a period at the end of its input; ``nltk.word_tokenize`` would do the same
after its punkt sentence split, whose data is not available here).
BLEU = ``sentence_bleu([gold_tokens], pred_tokens, smoothing_function=SmoothingFunction().method1)``
(default 4-gram uniform weights; note an identical text of < 4 tokens scores < 1 under nltk);
GLEU = ``sentence_gleu([gold_tokens], pred_tokens)``.
"""

from __future__ import annotations

from collections.abc import Sequence

_TOKENIZER = None


def lexical_tokens(steps: Sequence[str] | str, lowercase: bool = True) -> list[str]:
    """NLTKWordTokenizer tokens of each step (lower-cased by default), concatenated in order."""
    global _TOKENIZER
    if _TOKENIZER is None:
        from nltk.tokenize import NLTKWordTokenizer

        _TOKENIZER = NLTKWordTokenizer()
    if isinstance(steps, str):
        steps = [steps]
    out: list[str] = []
    for s in steps:
        s = s.lower() if lowercase else s
        out.extend(_TOKENIZER.tokenize(s))
    return out


def _has_content(tokens: Sequence[str]) -> bool:
    return any(any(ch.isalnum() for ch in t) for t in tokens)


def _lexical(kind: str, gold_steps, pred_steps, lowercase: bool) -> tuple[float | None, str | None]:
    ref = lexical_tokens(gold_steps, lowercase)
    hyp = lexical_tokens(pred_steps, lowercase)
    if not _has_content(ref):
        return None, "gold_without_tokens"
    if not hyp:
        return 0.0, "empty_candidate"
    if not _has_content(hyp):
        return 0.0, "candidate_without_tokens"
    if kind == "bleu":
        from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

        return float(sentence_bleu([ref], hyp, smoothing_function=SmoothingFunction().method1)), None
    from nltk.translate.gleu_score import sentence_gleu

    return float(sentence_gleu([ref], hyp)), None


def bleu(gold_steps: Sequence[str] | str, pred_steps: Sequence[str] | str,
         lowercase: bool = True) -> tuple[float | None, str | None]:
    """Sentence BLEU-4 (method1 smoothing) of the candidate's tokens against the gold's; ``(score, reason)``."""
    return _lexical("bleu", gold_steps, pred_steps, lowercase)


def gleu(gold_steps: Sequence[str] | str, pred_steps: Sequence[str] | str,
         lowercase: bool = True) -> tuple[float | None, str | None]:
    """Sentence GLEU (1..4-grams) of the candidate's tokens against the gold's; ``(score, reason)``."""
    return _lexical("gleu", gold_steps, pred_steps, lowercase)
