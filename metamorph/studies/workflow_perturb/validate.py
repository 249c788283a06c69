"""Static validation of a perturbed workflow (WorkflowPerturb App. A): does a variant (from the
LLM generator, :mod:`metamorph.studies.workflow_perturb.generate`) have the node count, kept
steps, merges and rewordings its perturbation type and N demand?

* :func:`check_variant` — the first problem as a sentence, or ``None``;
* :func:`check_output` — parse a model reply, then :func:`check_variant`;
* :func:`expected_nodes`, :func:`altered_from_output` — the helpers the generator reuses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from metamorph.errors import InputError
from metamorph.studies.workflow_perturb.vocab import PERTURBATION_TYPES
from metamorph.studies.workflow_perturb.workflows import (
    Edge,
    Workflow,
    graph_problem,
    normalize_text,
    parse_workflow_text,
)

__all__ = [
    "altered_from_output",
    "check_output",
    "check_type",
    "check_variant",
    "expected_nodes",
]


def check_type(ptype: str) -> None:
    """Raise ``ValueError`` unless ``ptype`` is one of :data:`PERTURBATION_TYPES`."""
    if ptype not in PERTURBATION_TYPES:
        raise ValueError(f"unknown perturbation type {ptype!r}; known: {list(PERTURBATION_TYPES)}")


_STOP = frozenset(
    {
        "a",
        "an",
        "the",
        "to",
        "of",
        "and",
        "or",
        "in",
        "on",
        "at",
        "for",
        "with",
        "from",
        "into",
        "onto",
        "by",
        "it",
        "its",
        "your",
        "you",
        "then",
        "also",
        "is",
        "are",
        "be",
        "this",
        "that",
        "these",
        "those",
        "as",
        "if",
    }
)


def _content_tokens(t: str) -> set[str]:
    return {x for x in re.findall(r"[a-z0-9]+", normalize_text(t)) if x not in _STOP}


def _covers(merged: str, step: str) -> bool:
    """A merged node covers a golden step when it contains the step's text, or at least half of the
    step's content words (stop words dropped)."""
    if normalize_text(step) in normalize_text(merged):
        return True
    tokens = _content_tokens(step)
    return bool(tokens) and len(tokens & _content_tokens(merged)) / len(tokens) >= 0.5


def _match_kept(golden: Workflow, nodes: Sequence[str]) -> tuple[dict[int, str], list[str]]:
    """Match output nodes to golden steps with the same normalized text (each golden step once,
    earliest first). Returns ``{output index: golden id}`` and the unmatched golden ids."""
    free = list(golden.node_ids)
    matched: dict[int, str] = {}
    for i, t in enumerate(nodes):
        key = normalize_text(t)
        hit = next((g for g in free if normalize_text(golden.text(g)) == key), None)
        if hit is not None:
            matched[i] = hit
            free.remove(hit)
    return matched, free


def expected_nodes(ptype: str, n_nodes: int, n: int) -> int:
    """Node count of a valid variant: ``n − N`` (missing, compressed) or ``n`` (description)."""
    check_type(ptype)
    return n_nodes if ptype == "description" else n_nodes - n


def check_variant(golden: Workflow, ptype: str, n: int, nodes: Sequence[str], edges: Sequence[Edge]) -> str | None:
    """Static validation of a variant (App. A): the first problem as a sentence, or ``None``.

    In order: the graph (:func:`~metamorph.studies.workflow_perturb.workflows.graph_problem` with no minimum size); the node
    count (:func:`expected_nodes`); the change count:

    * missing: every node is a golden step, unchanged (:func:`normalize_text` equality, each
      golden step used once);
    * compressed: every node is a golden step unchanged or a merge; every golden step not kept is
      covered by a merged node and every merged node covers at least two golden steps (coverage:
      the step's text or half its content words appear in the merged text);
    * description: the edges equal the golden edges and exactly N step texts differ from the
      golden ones at the same id.
    """
    check_type(ptype)
    problem = graph_problem(list(nodes), list(edges), min_nodes=1)
    if problem is not None:
        return f"invalid graph: {problem[1]}"
    want = expected_nodes(ptype, golden.n_nodes, n)
    if len(nodes) != want:
        how = (
            "unchanged"
            if ptype == "description"
            else f"{golden.n_nodes} golden steps minus {n} {'removed' if ptype == 'missing' else 'merged'}"
        )
        return f"expected {want} nodes ({how}), got {len(nodes)}"
    if ptype == "description":
        if set(edges) != set(golden.edges):
            return "the edges differ from the golden workflow's; description changes must keep every edge"
        changed = [
            str(i)
            for i, (a, b) in enumerate(zip(golden.nodes, nodes), start=1)
            if normalize_text(a) != normalize_text(b)
        ]
        if len(changed) != n:
            return f"expected exactly {n} changed step description{'s' if n != 1 else ''}, found {len(changed)}" + (
                f" (changed: {', '.join(changed)})" if changed else ""
            )
        return None
    matched, free = _match_kept(golden, nodes)
    others = [i for i in range(len(nodes)) if i not in matched]
    if ptype == "missing":
        if others:
            i = others[0]
            return (
                f"node {i + 1} ({nodes[i]!r}) is not one of the golden steps; the remaining steps must keep "
                "their text unchanged"
            )
        return None
    for i in others:
        covered = [g for g in free if _covers(nodes[i], golden.text(g))]
        if len(covered) < 2:
            return f"node {i + 1} ({nodes[i]!r}) is neither a golden step nor a merge of two golden steps"
    for g in free:
        if not any(_covers(nodes[i], golden.text(g)) for i in others):
            return f"golden step {g} ({golden.text(g)!r}) is neither kept nor part of a merged step"
    return None


def altered_from_output(golden: Workflow, ptype: str, nodes: Sequence[str]) -> tuple[str, ...]:
    """The golden step ids a checked variant altered: reworded ids (description) or golden steps
    not kept unchanged (missing, compressed)."""
    if ptype == "description":
        return tuple(
            str(i)
            for i, (a, b) in enumerate(zip(golden.nodes, nodes), start=1)
            if normalize_text(a) != normalize_text(b)
        )
    return tuple(_match_kept(golden, nodes)[1])


def check_output(
    golden: Workflow, ptype: str, n: int, text: str
) -> tuple[tuple[tuple[str, ...], tuple[Edge, ...]] | None, str | None]:
    """Parse a model reply and :func:`check_variant` it: ``((nodes, edges) or None, problem or None)``.
    A parse failure is the problem ``could not read the workflow: <reason>``."""
    try:
        nodes, edges = parse_workflow_text(text, source="reply")
    except InputError as exc:
        return None, f"could not read the workflow: {exc.problem}"
    return (nodes, edges), check_variant(golden, ptype, n, nodes, edges)
