"""LLM-as-Judge of WorkflowPerturb (App. B.6).

Default prompt (``style="b6"``): :data:`JUDGE_SYSTEM_B6` holds the B.6.1 rubric (levels 0–5 with
the paper's labels), the B.6.2 anchor examples A–E (4: one minor step missing; 5: perfect match;
3: minor reordering; 2: extra irrelevant steps; 0: completely incorrect), the B.6.3 procedure
(list nodes and edges of both workflows, match nodes by content, identify missing / extra /
reordered steps, initial score, self-check against the rubric, final score) and the B.6.4 reply
format: exactly one JSON object. B.6.4's list of fields is not in the paper's extracted text;
the fields here follow B.6.3's steps: ``missing_steps``, ``extra_steps``, ``reordered_steps``
(lists), ``initial_score`` (0–5), ``self_check`` (string), ``final_score`` (integer 0–5, the
score). Both workflows are rendered with explicit node and edge lists (B.6: ``Nodes:`` one per
line, ``Edges:`` all pairs, START/END included), so a DAG stays a DAG
(:func:`render_workflow`). :func:`parse_judge_json` reads the reply; :func:`judge_score` averages
the valid replies of :data:`JUDGE_N_CALLS` = 3 calls (B.6.5) and normalises by 5 (§5).

``style="score_line"``: the prompt and ``Score: N`` reply line used earlier
(:data:`JUDGE_RUBRIC`, :func:`parse_judge_score`).

Invalid replies (truncated, errored, unparseable, out of range) are excluded and counted, never
scored 0; with no valid reply the judge value is None.

source: App. B.6 (B.6.1–B.6.5), §4.5, §5.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from metamorph.studies.workflow_perturb.metrics.graph import WorkflowGraph, as_workflow

__all__ = [
    "JUDGE_MAX_SCORE",
    "JUDGE_N_CALLS",
    "JUDGE_REPLY_SCHEMA",
    "JUDGE_RUBRIC",
    "JUDGE_STYLES",
    "JUDGE_SYSTEM_B6",
    "judge_messages",
    "judge_score",
    "parse_judge_json",
    "parse_judge_reply",
    "parse_judge_score",
    "render_workflow",
]

#: Judge prompt/reply styles (the first is the default).
JUDGE_STYLES = ("b6", "score_line")

JUDGE_N_CALLS = 3
JUDGE_MAX_SCORE = 5


#: The ``score_line`` prompt (the earlier one): own rubric wording, reply ending in ``Score: N``.
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


JUDGE_SYSTEM_B6 = """\
You evaluate a generated workflow against a gold (reference) workflow for the same task.
Each workflow is a directed acyclic graph: a list of nodes (numbered steps) and a list of edges
(u, v) meaning step u must happen before step v; START and END mark the entry and the exit.

Rubric (score 0-5):
0 = Completely Incorrect or Irrelevant
1 = Major Flaws (breaks core logic)
2 = Significant Issues (omits several key steps or adds wrong steps)
3 = Noticeable Errors (minor reorder or one extra/missing non-critical step)
4 = Very Good (only one minor step missing)
5 = Perfect Match (fully adheres, detailed, accurate)

Anchor examples:
Example A (Score 4): the generated workflow is missing one minor step.
Example B (Score 5): the generated workflow perfectly matches the gold workflow.
Example C (Score 3): the generated workflow has a minor reordering of steps.
Example D (Score 2): the generated workflow has extra irrelevant steps.
Example E (Score 0): the generated workflow is completely incorrect relative to the task.

Procedure:
1. List the nodes and edges of both workflows.
2. Match nodes by content (paraphrases match).
3. Identify missing, extra, or reordered steps.
4. Assign an initial score using the rubric.
5. Perform a self-check: confirm that the initial score strictly follows the rubric.
6. Adjust to a final score if necessary.

Return exactly one JSON object and nothing else, with these fields:
{"missing_steps": [...], "extra_steps": [...], "reordered_steps": [...],
 "initial_score": <integer 0-5>, "self_check": "<one sentence>", "final_score": <integer 0-5>}"""


#: JSON schema of the B.6.4 reply (the fields of :data:`JUDGE_SYSTEM_B6`), for the optional
#: constrained-decoding judge (``response_format = {"type": "json_object", "schema": ...}``:
#: a llama.cpp grammar / OpenAI structured outputs, as the wrapper study's constrained arm). Not
#: the paper's judge, which is unconstrained; lists and strings are bounded so that a reply fits
#: in 400 tokens (3 lists × 3 items × 60 characters + a 120-character self-check).
JUDGE_REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "missing_steps": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 60}},
        "extra_steps": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 60}},
        "reordered_steps": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 60}},
        "initial_score": {"type": "integer", "enum": list(range(JUDGE_MAX_SCORE + 1))},
        "self_check": {"type": "string", "maxLength": 120},
        "final_score": {"type": "integer", "enum": list(range(JUDGE_MAX_SCORE + 1))},
    },
    "required": ["missing_steps", "extra_steps", "reordered_steps", "initial_score", "self_check", "final_score"],
    "additionalProperties": False,
}


def render_workflow(wf: Any) -> str:
    """Explicit node and edge lists (App. B.6): ``Nodes:`` then ``k: text`` per step, then
    ``Edges:`` with every edge as ``(u, v)`` (START/END included). A bare list of steps is a
    chain (:func:`~metamorph.studies.workflow_perturb.metrics.graph.as_workflow`)."""
    w = as_workflow(wf)
    nodes = [f"{k}: {s}" for k, s in enumerate(w.nodes, start=1)] or ["(no steps)"]
    edges = " ".join(f"({u}, {v})" for u, v in w.edges) or "(none)"
    return "Nodes:\n" + "\n".join(nodes) + f"\nEdges: {edges}"


def _render_workflow(wf: WorkflowGraph) -> str:
    lines = [f"{k}. {s}" for k, s in enumerate(wf.nodes, start=1)] or ["(no steps)"]
    edges = ", ".join(f"({u}, {v})" for u, v in wf.edges) or "(none)"
    return "\n".join(lines) + f"\nEdges: {edges}"


def judge_messages(gold: Any, pred: Any, task: str, style: str = "b6") -> list[dict[str, str]]:
    """Chat messages (system + user) for one judge call.

    ``gold``/``pred``: anything :func:`~metamorph.studies.workflow_perturb.metrics.graph.as_workflow`
    accepts — pass the workflow objects (nodes **and** edges); a bare list of steps is read as a
    chain. ``style="b6"`` (default): :data:`JUDGE_SYSTEM_B6` and both workflows as
    :func:`render_workflow`, reply = one JSON object; ``"score_line"``: :data:`JUDGE_RUBRIC`,
    reply ending in ``Score: N``. Raises ``ValueError`` for an unknown style. source: App. B.6.
    """
    if style not in JUDGE_STYLES:
        raise ValueError(f"style must be one of {JUDGE_STYLES}, not {style!r}")
    g, p = as_workflow(gold), as_workflow(pred)
    if style == "b6":
        user = (
            f"Task:\n{task.strip()}\n\n"
            f"Gold workflow:\n{render_workflow(g)}\n\n"
            f"Generated workflow:\n{render_workflow(p)}\n\n"
            "Follow the procedure and return the JSON object."
        )
        return [{"role": "system", "content": JUDGE_SYSTEM_B6}, {"role": "user", "content": user}]
    user = (
        f"Task:\n{task.strip()}\n\n"
        f"Reference workflow:\n{_render_workflow(g)}\n\n"
        f"Candidate workflow:\n{_render_workflow(p)}\n\n"
        "Grade the candidate with the rubric. End with the line 'Score: N'."
    )
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


_FENCE_RE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL | re.IGNORECASE)


def _finish_problem(finish_reason: str | None) -> str | None:
    fr = None if finish_reason is None else str(finish_reason).strip().lower()
    if fr in _TRUNCATED:
        return "truncated"
    if fr is not None and fr not in _FINISHED:
        return f"finish_reason:{fr}"
    return None


def parse_judge_json(text: str | None, finish_reason: str | None = None) -> tuple[int | None, str]:
    """``(final_score, "ok")`` for a valid B.6.4 reply, else ``(None, reason)``.

    Valid: the reply finished normally (as :func:`parse_judge_score`) and is exactly one JSON
    object — optionally inside one ```` ``` ```` / ```` ```json ```` fence, surrounding
    whitespace ignored, nothing else — whose ``final_score`` is an integer 0..5 (a JSON number
    with no fraction: ``4`` or ``4.0``; not a string, not a bool). Reasons: ``truncated``,
    ``finish_reason:<x>``, ``empty_reply``, ``not_json`` (not one JSON value, or text around
    it), ``not_an_object``, ``no_final_score``, ``non_integer``, ``out_of_range``.
    source: App. B.6.4.
    """
    problem = _finish_problem(finish_reason)
    if problem is not None:
        return None, problem
    if text is None or not str(text).strip():
        return None, "empty_reply"
    body = str(text).strip()
    m = _FENCE_RE.match(body)
    if m:
        body = m.group(1).strip()
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):  # also an integer over 4,300 digits, nesting past the parser's depth
        return None, "not_json"
    if not isinstance(obj, dict):
        return None, "not_an_object"
    if "final_score" not in obj or obj["final_score"] is None:
        return None, "no_final_score"
    v = obj["final_score"]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None, "non_integer"
    if isinstance(v, float) and not v.is_integer():
        return None, "non_integer"
    score = int(v)
    if not 0 <= score <= JUDGE_MAX_SCORE:
        return None, "out_of_range"
    return score, "ok"


def parse_judge_reply(text: str | None, finish_reason: str | None = None, style: str = "b6") -> tuple[int | None, str]:
    """:func:`parse_judge_json` (``style="b6"``) or :func:`parse_judge_score` (``"score_line"``)."""
    if style not in JUDGE_STYLES:
        raise ValueError(f"style must be one of {JUDGE_STYLES}, not {style!r}")
    return parse_judge_json(text, finish_reason) if style == "b6" else parse_judge_score(text, finish_reason)


def _reply_parts(reply: Any) -> tuple[str | None, str | None, Any]:
    if isinstance(reply, str) or reply is None:
        return reply, None, None
    if isinstance(reply, Mapping):
        return reply.get("text"), reply.get("finish_reason"), reply.get("error")
    if isinstance(reply, (tuple, list)):
        return (reply[0], reply[1] if len(reply) > 1 else None, None)
    return getattr(reply, "text", None), getattr(reply, "finish_reason", None), getattr(reply, "error", None)


def judge_score(replies: Iterable[Any], style: str = "b6") -> tuple[float | None, int, int]:
    """``(mean score / 5 over valid replies, n_valid, n_invalid)``; ``(None, 0, n)`` if none is valid.
    Replies are parsed with :func:`parse_judge_reply` of ``style`` (default: B.6.4 JSON).

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
        s, _ = parse_judge_reply(text, fr, style)
        if s is None:
            n_invalid += 1
        else:
            scores.append(s)
    if not scores:
        return None, 0, n_invalid
    return sum(scores) / (JUDGE_MAX_SCORE * len(scores)), len(scores), n_invalid
