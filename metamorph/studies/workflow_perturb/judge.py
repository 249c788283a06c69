"""LLM-as-Judge of WorkflowPerturb (App. B.6).

:data:`JUDGE_RUBRIC` (levels 0–5 with anchor cases), :func:`judge_messages`,
:func:`parse_judge_score` and :func:`judge_score` (mean of valid replies / 5 over
:data:`JUDGE_N_CALLS` = 3 calls).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from metamorph.studies.workflow_perturb.metrics.graph import WorkflowGraph, as_workflow

JUDGE_N_CALLS = 3
JUDGE_MAX_SCORE = 5


JUDGE_RUBRIC = """\
You are grading a candidate workflow against a validated reference workflow for the same task.
A workflow is a list of numbered steps plus dependencies (edges) between steps; START and END
mark the entry and exit. Judge whether executing the candidate would accomplish the task as the
reference does: are the reference's essential steps present (paraphrase is fine), are
dependencies and order respected, and is nothing harmful or contradictory added?
Do not reward length, style or wording; judge function.

Score on this 0-5 scale:
5 - Equivalent. Every essential step is present and the dependencies and order are preserved;
    differences are wording only.
    Anchor: every step is reworded but none is dropped, merged or reordered.
4 - Minor deviation. All essential steps are present; a minor step is missing or two adjacent
    steps are merged, or a harmless extra step is added; the workflow would still work.
    Anchor: one trivial step (e.g. "open the settings page") is folded into the next step.
3 - Partially correct. Most essential steps are present, but one essential step is missing,
    several steps are compressed so that detail is lost, or one dependency is violated; it
    would need a fix before it could be run.
    Anchor: about a third of the steps are merged into coarse steps that omit required details.
2 - Major gaps. Several essential steps are missing or substantially reordered; the workflow
    would likely fail.
    Anchor: about half of the reference steps are missing.
1 - Barely related. Only a few steps overlap with the reference; it would not accomplish the
    task.
    Anchor: the candidate covers only the first step of a multi-step reference.
0 - Unusable. Empty, unrelated to the task, or contradicting the reference.
    Anchor: the candidate describes a different task, or has no steps.

Reply with at most three sentences of justification, then a final line exactly of the form
Score: N
where N is one integer from 0 to 5."""


def _render_workflow(wf: WorkflowGraph) -> str:
    lines = [f"{k}. {s}" for k, s in enumerate(wf.nodes, start=1)] or ["(no steps)"]
    edges = ", ".join(f"({u}, {v})" for u, v in wf.edges) or "(none)"
    return "\n".join(lines) + f"\nEdges: {edges}"


def judge_messages(gold: Any, pred: Any, task: str) -> list[dict[str, str]]:
    """Chat messages (system rubric + user case) asking for a 0–5 score ending in ``Score: N``."""
    g, p = as_workflow(gold), as_workflow(pred)
    user = (f"Task:\n{task.strip()}\n\n"
            f"Reference workflow:\n{_render_workflow(g)}\n\n"
            f"Candidate workflow:\n{_render_workflow(p)}\n\n"
            "Grade the candidate with the rubric. End with the line 'Score: N'.")
    return [{"role": "system", "content": JUDGE_RUBRIC}, {"role": "user", "content": user}]


_TRUNCATED = frozenset({"length", "max_tokens", "max_output_tokens"})
_FINISHED = frozenset({"stop", "end_turn", "stop_sequence", "eos"})
_SCORE_RE = re.compile(r"\bscore\b[\s*_`]*[:=][\s*_`]*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_BARE_RE = re.compile(r"^\s*[*_`]*(-?\d+(?:\.\d+)?)[*_`]*\s*\.?\s*$")


def parse_judge_score(text: str | None, finish_reason: str | None = None) -> tuple[int | None, str]:
    """``(score, "ok")`` for a valid reply, else ``(None, reason)``.

    Valid: the reply finished normally (``finish_reason`` None, stop, end_turn, stop_sequence,
    eos) and its **last** ``Score: N`` (case-insensitive; markdown emphasis and ``N/5`` allowed)
    — or, failing any such label, a reply that is only a number — is an integer 0..5.
    Reasons: ``truncated`` (length / max_tokens / max_output_tokens: excluded even if a score is
    visible), ``finish_reason:<x>`` (e.g. content_filter), ``empty_reply``, ``no_score``,
    ``non_integer``, ``out_of_range``.
    """
    fr = None if finish_reason is None else str(finish_reason).strip().lower()
    if fr in _TRUNCATED:
        return None, "truncated"
    if fr is not None and fr not in _FINISHED:
        return None, f"finish_reason:{fr}"
    if text is None or not str(text).strip():
        return None, "empty_reply"
    hits = _SCORE_RE.findall(text)
    if hits:
        raw = hits[-1]
    else:
        m = _BARE_RE.match(text)
        if not m:
            return None, "no_score"
        raw = m.group(1)
    value = float(raw)
    if not value.is_integer():
        return None, "non_integer"
    score = int(value)
    if not 0 <= score <= JUDGE_MAX_SCORE:
        return None, "out_of_range"
    return score, "ok"


def _reply_parts(reply: Any) -> tuple[str | None, str | None, Any]:
    if isinstance(reply, str) or reply is None:
        return reply, None, None
    if isinstance(reply, Mapping):
        return reply.get("text"), reply.get("finish_reason"), reply.get("error")
    if isinstance(reply, (tuple, list)):
        return (reply[0], reply[1] if len(reply) > 1 else None, None)
    return getattr(reply, "text", None), getattr(reply, "finish_reason", None), getattr(reply, "error", None)


def judge_score(replies: Iterable[Any]) -> tuple[float | None, int, int]:
    """``(mean score / 5 over valid replies, n_valid, n_invalid)``; ``(None, 0, n)`` if none is valid.

    A reply is ``(text, finish_reason)``, a str (finish_reason unknown), a dict with
    ``text``/``finish_reason``/``error``, or an object with those attributes (e.g.
    :class:`metamorph.providers.base.GenerationResult`; a non-None ``error`` makes it invalid).
    Invalid replies are excluded and counted, never scored as 0. The study makes
    :data:`JUDGE_N_CALLS` calls per case.
    """
    scores: list[int] = []
    n_invalid = 0
    for reply in replies:
        text, fr, err = _reply_parts(reply)
        if err is not None:
            n_invalid += 1
            continue
        s, _ = parse_judge_score(text, fr)
        if s is None:
            n_invalid += 1
        else:
            scores.append(s)
    if not scores:
        return None, 0, n_invalid
    return sum(scores) / (JUDGE_MAX_SCORE * len(scores)), len(scores), n_invalid
