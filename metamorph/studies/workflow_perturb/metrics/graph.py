"""Workflow graphs as the metrics take them: steps plus edges with START/END sentinels.

A workflow is a list of step descriptions (nodes ``"1"``..``"n"`` in list order) plus directed
edges between node ids, including the sentinels ``"START"`` and ``"END"``
(:class:`WorkflowGraph`; :func:`as_workflow` also accepts any object with ``nodes``/``edges``
attributes such as ``metamorph.studies.workflow_perturb.workflows.Workflow``, ``(nodes, edges)``, a dict with
``nodes``/``edges``, or a bare list of steps = a linear chain START→1→…→n→END). Edge ids may
be ``str`` or ``int`` (1..n); ``"start"``/``"end"`` are case-insensitive. Gold edges that name
an unknown node or are self-loops raise ``ValueError``; such *predicted* edges are dropped and
counted (``pred_invalid_edges``). Duplicate edges count once.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "END",
    "START",
    "WorkflowGraph",
    "as_workflow",
    "chain_edges",
    "clean_edges",
]

START, END = "START", "END"


class WorkflowGraph(NamedTuple):
    """Steps (node ``"k"`` is ``nodes[k-1]``) and directed edges between node ids / START / END."""

    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]


def chain_edges(n: int) -> tuple[tuple[str, str], ...]:
    """START → 1 → … → n → END (START → END when n = 0)."""
    ids = [START] + [str(k) for k in range(1, n + 1)] + [END]
    return tuple(pairwise(ids))


def as_workflow(obj: Any) -> WorkflowGraph:
    """Coerce a :class:`WorkflowGraph`, an object with ``nodes``/``edges`` attributes (such as
    :class:`metamorph.studies.workflow_perturb.workflows.Workflow`), ``(nodes, edges)``, ``{"nodes", "edges"}`` or a list of steps.

    ``edges`` of ``None`` (or a bare list of steps) means the linear chain :func:`chain_edges`.
    Steps are NFC-normalised (``unicodedata``), so that every metric — the alignment, BLEU, GLEU,
    BERTScore — sees one spelling of the same text.
    Edge endpoints are kept as given here; they are checked by the graph metric.
    """
    if isinstance(obj, WorkflowGraph):
        return obj
    if hasattr(obj, "nodes") and hasattr(obj, "edges"):  # e.g. metamorph.studies.workflow_perturb.workflows.Workflow
        nodes, edges = obj.nodes, obj.edges
    elif isinstance(obj, Mapping):
        nodes, edges = obj.get("nodes", ()), obj.get("edges")
    elif isinstance(obj, str):
        raise TypeError("a workflow is a list of steps, not a single string")
    elif isinstance(obj, tuple) and len(obj) == 2 and not isinstance(obj[0], str):
        nodes, edges = obj
    else:
        nodes, edges = obj, None
    # NFC once, here: every metric compares text, not code points ("café" composed or decomposed)
    nodes = tuple("" if s is None else unicodedata.normalize("NFC", str(s)) for s in (nodes or ()))
    if edges is None:
        edges = chain_edges(len(nodes))
    return WorkflowGraph(nodes, tuple(tuple(e) for e in edges))


def _norm_id(x: Any, n: int) -> str | None:
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, (int, np.integer)):
        return str(int(x)) if 1 <= int(x) <= n else None
    if isinstance(x, str):
        s = x.strip()
        if s.upper() in (START, END):
            return s.upper()
        if s.isdigit() and 1 <= int(s) <= n:
            return str(int(s))
    return None


def clean_edges(edges: Iterable[Sequence[Any]], n: int, *, strict: bool) -> tuple[set[tuple[str, str]], int]:
    """Normalised edge set and the number of invalid edges (raise instead when ``strict``)."""
    out: set[tuple[str, str]] = set()
    bad = 0
    for e in edges:
        ok = isinstance(e, (tuple, list)) and len(e) == 2
        u = _norm_id(e[0], n) if ok else None
        v = _norm_id(e[1], n) if ok else None
        if u is None or v is None or u == v or u == END or v == START:
            if strict:
                raise ValueError(f"invalid gold edge {e!r} for {n} steps")
            bad += 1
            continue
        out.add((u, v))
    return out, bad
