"""Golden workflows of the WorkflowPerturb study (Kanda et al., arXiv:2602.17990 §3.1).

A workflow is a DAG G = (V, E): numbered step descriptions (nodes ``"1".."n"``) and precedence
edges whose endpoints are node ids or the two virtual nodes ``START`` and ``END``. The text form
is WorFBench's::

    Node:
    1: go to sofa 1
    2: take pillow 1 from sofa 1
    ...
    Edge: (START,1) (1,2) (2,3) ... (n,END)

:func:`parse_workflow_text` reads it tolerantly (blank lines, prose around the node list, edges on
several lines or as a bulleted list, spaces inside parentheses, markdown emphasis/fences around
the markers); :func:`format_workflow` writes the canonical form above, and
``parse_workflow_text(format_workflow(w)) == (w.nodes, w.edges)`` for every workflow.

Validation (§3.1): :func:`validate_workflow` requires at least :data:`MIN_NODES` (5) nodes, every
edge endpoint an existing node or START/END (START never a target, END never a source), an
outgoing edge from START and an incoming edge into END, and no cycle. A violation raises
:class:`~metamorph.errors.InputError` naming the file, the 1-based row, the field and the
workflow id.

Sources: :func:`load_goldens` reads WorFBench-shaped rows from a local JSONL/JSON/CSV/Parquet file
or an ``hf://`` URI; ``embedded`` is :func:`~metamorph.studies.workflow_perturb.goldens.embedded_goldens`, workflows written for this project.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metamorph.datasets import read_rows, required_id, required_text
from metamorph.errors import InputError
from metamorph.studies.workflow_perturb.vocab import SIZE_STRATA

__all__ = [
    "END",
    "JSON_CELLS",
    "MIN_NODES",
    "START",
    "Edge",
    "RejectedGolden",
    "Workflow",
    "edge_sort_key",
    "find_cycle",
    "format_workflow",
    "graph_problem",
    "load_goldens",
    "normalize_text",
    "off_path_nodes",
    "parse_workflow_text",
    "size_stratum",
    "validate_workflow",
    "workflow_from_row",
    "load_all_goldens",
    "load_goldens_by_source",
]

START = "START"

END = "END"

#: §3.1: goldens have at least five steps.
MIN_NODES = 5


Edge = tuple[str, str]


@dataclass(frozen=True)
class Workflow:
    """One workflow graph.

    Attributes:
        workflow_id: unique id (a WorFBench id such as ``alfworld_1613``, or ``embedded/<name>``).
        task: the task the workflow solves, in words.
        nodes: step descriptions in node-id order: ``nodes[i]`` is node ``str(i + 1)``.
        edges: ``(from, to)`` pairs over ``"1".."n"``, ``START`` and ``END``, in file order.
        source: where the workflow comes from: the WorFBench sub-source of the row (``alfworld``,
            ``wikihow``...) when the row has one, ``embedded`` for :func:`~metamorph.studies.workflow_perturb.goldens.embedded_goldens`,
            else the file or URI it was read from.
    """

    workflow_id: str
    task: str
    nodes: tuple[str, ...]
    edges: tuple[Edge, ...]
    source: str = "embedded"

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(str(t) for t in self.nodes))
        object.__setattr__(self, "edges", tuple((str(u), str(v)) for u, v in self.edges))

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def node_ids(self) -> tuple[str, ...]:
        """``("1", ..., str(n))``."""
        return tuple(str(i) for i in range(1, len(self.nodes) + 1))

    def text(self, node_id: str) -> str:
        """Description of node ``node_id`` (``"1".."n"``)."""
        return self.nodes[int(node_id) - 1]

    def successors(self) -> dict[str, list[str]]:
        """Adjacency ``{node: [successors in edge order]}`` over START, the node ids and END."""
        return self._adjacency(reverse=False)

    def predecessors(self) -> dict[str, list[str]]:
        """Reverse adjacency ``{node: [predecessors in edge order]}``."""
        return self._adjacency(reverse=True)

    def _adjacency(self, reverse: bool) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {k: [] for k in (START, *self.node_ids, END)}
        for u, v in self.edges:
            src, dst = (v, u) if reverse else (u, v)
            out.setdefault(src, []).append(dst)
            out.setdefault(dst, [])
        return out

    def to_text(self) -> str:
        """:func:`format_workflow` of this workflow."""
        return format_workflow(self)

    @property
    def size_stratum(self) -> str:
        """:func:`size_stratum` of the node count."""
        return size_stratum(self.n_nodes)


def size_stratum(n_nodes: int) -> str:
    """The Table-7 size stratum ``5-7``, ``8-15`` or ``16+``; ``<5`` below the §3.1 minimum."""
    for label, (lo, hi) in SIZE_STRATA.items():
        if lo <= n_nodes <= hi:
            return label
    return "<5"


def edge_sort_key(edge: Edge) -> tuple[float, float]:
    """Sort key putting START first, node ids numerically, END last."""

    def rank(x: str) -> float:
        return -1.0 if x == START else math.inf if x == END else float(int(x))

    return rank(edge[0]), rank(edge[1])


_NODE_MARK = re.compile(r"^[\s*#`>_-]*nodes?[\s*_]*:[\s*_]*(.*)$", re.IGNORECASE)

_EDGE_MARK = re.compile(r"^[\s*#`>_-]*edges?[\s*_]*:[\s*_]*(.*)$", re.IGNORECASE)

_NODE_LINE = re.compile(r"^[\s*>-]*(?:node\s*)?(\d+)\s*[:.)]\s*(.*?)\s*$", re.IGNORECASE)

_EDGE_PAIR = re.compile(r"\(\s*(START|END|\d+)\s*,\s*(START|END|\d+)\s*\)", re.IGNORECASE)


def parse_workflow_text(
    text: str, source: str = "<text>", row: int | None = None, field: str | None = None
) -> tuple[tuple[str, ...], tuple[Edge, ...]]:
    """Parse the WorFBench ``Node:`` / ``Edge:`` text into ``(nodes, edges)``.

    Node lines are ``<k>: <description>`` (``<k>.`` and ``<k>)`` also accepted, optionally
    bulleted) between the ``Node:`` marker (optional) and the first ``Edge:`` line; other lines
    there (prose, blank lines, code fences) are ignored. Edges are every ``(u,v)`` pair after the
    ``Edge:`` marker, with u, v in ``START``/``END``/digits (case-insensitive, spaces allowed).

    The text is NFC-normalised first (steps compare as text, not code points).

    Returns:
        ``nodes`` (descriptions, in id order) and ``edges`` (``(u, v)`` in text order, START/END
        upper-cased). Structural checks (DAG, endpoints...) are :func:`validate_workflow`'s job.

    Raises:
        InputError: no ``Edge:`` marker, no node line, node ids not exactly 1..n in order, an empty
            description, or no edge pair. ``source``/``row``/``field`` locate the text.
    """
    lines = unicodedata.normalize("NFC", str(text)).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    edge_at = next((i for i, line in enumerate(lines) if _EDGE_MARK.match(line)), None)
    if edge_at is None:
        raise InputError(source, "no 'Edge:' line in the workflow text", row=row, field=field)
    node_at = next((i for i, line in enumerate(lines[:edge_at]) if _NODE_MARK.match(line)), None)
    node_lines = lines[(node_at + 1 if node_at is not None else 0) : edge_at]
    if node_at is not None:
        rest = _NODE_MARK.match(lines[node_at]).group(1)  # type: ignore[union-attr]
        if rest.strip():
            node_lines.insert(0, rest)
    ids, nodes = [], []
    for line in node_lines:
        m = _NODE_LINE.match(line)
        if m:
            ids.append(int(m.group(1)))
            nodes.append(m.group(2))
    if not nodes:
        raise InputError(source, "no node lines ('<k>: <step>') before 'Edge:'", row=row, field=field)
    if ids != list(range(1, len(ids) + 1)):
        raise InputError(source, f"node ids must be 1..{len(ids)} in order, got {ids}", row=row, field=field)
    for k, t in zip(ids, nodes):
        if not t.strip():
            raise InputError(source, f"node {k} has an empty description", row=row, field=field)
    edge_text = "\n".join([_EDGE_MARK.match(lines[edge_at]).group(1), *lines[edge_at + 1 :]])  # type: ignore[union-attr]
    edges = tuple((_norm_end(u), _norm_end(v)) for u, v in _EDGE_PAIR.findall(edge_text))
    if not edges:
        raise InputError(source, "no '(u,v)' edge after 'Edge:'", row=row, field=field)
    return tuple(nodes), edges


def _norm_end(x: str) -> str:
    up = x.upper()
    return up if up in (START, END) else str(int(x))


def format_workflow(w: Workflow | tuple[Sequence[str], Sequence[Edge]]) -> str:
    """Canonical WorFBench text: ``Node:`` then ``k: text`` lines, then ``Edge: (u,v) (u,v) ...``
    on one line, edges in the workflow's order. Accepts a :class:`Workflow` or ``(nodes, edges)``."""
    nodes, edges = (w.nodes, w.edges) if isinstance(w, Workflow) else w
    body = "\n".join(f"{i}: {t}" for i, t in enumerate(nodes, start=1))
    return f"Node:\n{body}\nEdge: " + " ".join(f"({u},{v})" for u, v in edges)


def graph_problem(nodes: Sequence[str], edges: Sequence[Edge], min_nodes: int = MIN_NODES) -> tuple[str, str] | None:
    """The first §3.1 violation of a graph as ``(field, problem)``, or ``None`` when it is valid.

    Checks, in this order (the first failing one is reported): ``nodes`` — at least ``min_nodes``
    nodes, none empty; ``edges`` — every endpoint is ``1..n``, START or END; no edge into START or
    out of END; START has an outgoing edge; END has an incoming edge; no cycle (the first cycle
    found by a depth-first search in id order is named, e.g. ``2 -> 3 -> 2``). ``field`` is
    ``"nodes"`` or ``"edges"``.
    """
    n = len(nodes)
    if n < min_nodes:
        return "nodes", f"has {n} node{'s' if n != 1 else ''}; at least {min_nodes} are required (§3.1)"
    for i, t in enumerate(nodes, start=1):
        if not str(t).strip():
            return "nodes", f"node {i} has an empty description"
    valid = {str(i) for i in range(1, n + 1)}
    for u, v in edges:
        for x in (u, v):
            if x not in valid and x not in (START, END):
                return "edges", f"edge ({u},{v}) names node {x!r}, which does not exist (nodes are 1..{n})"
        if v == START:
            return "edges", f"edge ({u},{v}) points into START"
        if u == END:
            return "edges", f"edge ({u},{v}) leaves END"
    if not any(u == START for u, _ in edges):
        return "edges", "START has no outgoing edge"
    if not any(v == END for _, v in edges):
        return "edges", "END has no incoming edge"
    cycle = find_cycle(edges, order=[START, *sorted(valid, key=int), END])
    if cycle:
        return "edges", "edges form a cycle: " + " -> ".join(cycle)
    return None


def find_cycle(edges: Iterable[Edge], order: Sequence[str] | None = None) -> list[str] | None:
    """A directed cycle as a node list closing on its first node (``["2", "3", "2"]``), or ``None``.

    Depth-first search started from the vertices in ``order`` (default: first appearance)."""
    succ: dict[str, list[str]] = {}
    for u, v in edges:
        succ.setdefault(u, []).append(v)
        succ.setdefault(v, [])
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    for root in list(order or []) + list(succ):
        if root not in succ or state.get(root):
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        path = [root]
        state[root] = 1
        while stack:
            node, i = stack[-1]
            nxt = succ[node]
            if i < len(nxt):
                stack[-1] = (node, i + 1)
                w = nxt[i]
                if state.get(w) == 1:
                    return path[path.index(w) :] + [w]
                if not state.get(w):
                    state[w] = 1
                    stack.append((w, 0))
                    path.append(w)
            else:
                state[node] = 2
                stack.pop()
                path.pop()
    return None


def off_path_nodes(w: Workflow) -> tuple[str, ...]:
    """Node ids not on any START → END path (unreachable from START, or not reaching END).

    Informational, not a §3.1 violation: WorFBench goldens often leave a final side step without an
    edge into END (6 of the 300 shared rows have such nodes; ``lumos_21358`` has 3 nodes without
    any edge)."""

    def reach(root: str, adj: dict[str, list[str]]) -> set[str]:
        seen, stack = {root}, [root]
        while stack:
            for y in adj.get(stack.pop(), []):
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return seen

    on = reach(START, w.successors()) & reach(END, w.predecessors())
    return tuple(k for k in w.node_ids if k not in on)


def validate_workflow(
    w: Workflow,
    source: str | None = None,
    row: int | None = None,
    nodes_field: str = "nodes",
    edges_field: str = "edges",
    min_nodes: int = MIN_NODES,
) -> None:
    """Raise :class:`InputError` on the first :func:`graph_problem` of ``w``.

    The error names ``source`` (default ``w.source``), ``row``, the field (``nodes_field`` or
    ``edges_field``) and starts with ``workflow '<id>': ``.
    """
    problem = graph_problem(w.nodes, w.edges, min_nodes=min_nodes)
    if problem is not None:
        field, text = problem
        raise InputError(
            source or w.source,
            f"workflow {w.workflow_id!r}: {text}",
            row=row,
            field=nodes_field if field == "nodes" else edges_field,
        )


@dataclass(frozen=True)
class RejectedGolden:
    """A row that parsed but broke a §3.1 rule (kept for the asset's report, never dropped silently).

    Attributes: workflow_id, source (file/URI), row (1-based), field, reason (the InputError's
    problem text), n_nodes, and the parsed workflow itself.
    """

    workflow_id: str
    source: str
    row: int
    field: str | None
    reason: str
    n_nodes: int
    workflow: Workflow


#: The list fields of a golden, with the words their errors use: JSON text in a CSV cell, decoded
#: by :func:`metamorph.datasets.read_rows`.
JSON_CELLS = {"gold_nodes": "a list of steps", "gold_edges": "a list of [from, to] pairs"}


def _as_list(value: Any, uri: str, row: int, field: str) -> list:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise InputError(uri, f"expected a list, got {type(value).__name__}", row=row, field=field)
    return [v.tolist() if hasattr(v, "tolist") else v for v in value]


def _structured(row: dict, uri: str, i: int) -> tuple[tuple[str, ...], tuple[Edge, ...]]:
    raw_nodes = _as_list(row["gold_nodes"], uri, i, "gold_nodes")
    ids, texts = [], []
    for k, node in enumerate(raw_nodes, start=1):
        if isinstance(node, dict) and isinstance(node.get("text"), str):
            ids.append(str(node.get("id", k)))
            texts.append(str(node["text"]))
        elif isinstance(node, str):
            ids.append(str(k))
            texts.append(node)
        else:
            raise InputError(
                uri,
                f"node {k} must be {{'id', 'text'}} with a text or a string, got {node!r:.60}",
                row=i,
                field="gold_nodes",
            )
    if ids != [str(k) for k in range(1, len(ids) + 1)]:
        raise InputError(uri, f"node ids must be 1..{len(ids)} in order, got {ids}", row=i, field="gold_nodes")
    edges = []
    for e in _as_list(row["gold_edges"], uri, i, "gold_edges"):
        if not isinstance(e, (list, tuple)) or len(e) != 2:
            raise InputError(uri, f"an edge must be a [from, to] pair, got {e!r:.60}", row=i, field="gold_edges")
        edges.append((_norm_endpoint(e[0]), _norm_endpoint(e[1])))
    return tuple(texts), tuple(edges)


def _norm_endpoint(x: Any) -> str:
    s = str(x).strip()
    return s.upper() if s.upper() in (START, END) else s


def workflow_from_row(row: dict, uri: str, i: int) -> tuple[Workflow, str, str]:
    """Build the (unvalidated) workflow of one WorFBench-shaped row.

    Fields: ``id`` (required), ``task`` (required), and the graph either as ``gold_nodes`` +
    ``gold_edges`` (preferred when both are present) or as ``gold_raw`` text; ``source`` is
    optional. Returns the workflow and the names of the fields its nodes and edges came from.
    Raises :class:`InputError` for a missing field or an unparseable graph.
    """
    wid, task = required_id(row, "id", uri, i), required_text(row, "task", uri, i)
    if row.get("gold_nodes") is not None and row.get("gold_edges") is not None:
        nodes, edges = _structured(row, uri, i)
        fields = ("gold_nodes", "gold_edges")
    elif isinstance(row.get("gold_raw"), str) and row["gold_raw"].strip():
        nodes, edges = parse_workflow_text(row["gold_raw"], uri, i, "gold_raw")
        fields = ("gold_raw", "gold_raw")
    else:
        raise InputError(uri, "a golden needs gold_nodes + gold_edges or gold_raw", row=i, field="gold_nodes")
    src = row.get("source")
    w = Workflow(wid, task, nodes, edges, str(src) if isinstance(src, str) and src.strip() else uri)
    return w, fields[0], fields[1]


def load_goldens(
    spec: str, on_invalid: Literal["error", "collect"] = "error", limit: int | None = None
) -> tuple[list[Workflow], list[RejectedGolden]]:
    """Load golden workflows.

    Args:
        spec: ``embedded`` (:func:`~metamorph.studies.workflow_perturb.goldens.embedded_goldens`), or a local JSONL/JSON/CSV/Parquet path or
            ``hf://`` URI of WorFBench-shaped rows (see :func:`workflow_from_row`); an optional
            ``worfbench:`` prefix is accepted.
        on_invalid: ``"error"`` raises on the first row breaking a §3.1 rule (:func:`graph_problem`);
            ``"collect"`` returns such rows as :class:`RejectedGolden` instead.
        limit: keep only the first ``limit`` rows of the file.

    Returns:
        ``(valid, rejected)``; ``rejected`` is always empty with ``on_invalid="error"``.

    Raises:
        InputError: (all-or-nothing; nothing is returned) unreadable file, missing id/task/graph
            field, unparseable graph text, a duplicate id (naming the first row), and — with
            ``on_invalid="error"`` — any §3.1 violation, naming file, row, field and workflow id.
    """
    if on_invalid not in ("error", "collect"):
        raise ValueError(f"on_invalid must be 'error' or 'collect', got {on_invalid!r}")
    if spec == "embedded":
        from metamorph.studies.workflow_perturb.goldens import embedded_goldens

        ws = embedded_goldens()
        return (ws if limit is None else ws[:limit]), []
    uri = spec.removeprefix("worfbench:")
    raw = read_rows(uri, JSON_CELLS)
    if limit is not None:
        raw = raw[:limit]
    parsed: list[tuple[Workflow, int, str, str]] = []
    seen: dict[str, int] = {}
    for j, r in enumerate(raw, start=1):
        i = int(r.get("__row__", j))
        w, nodes_field, edges_field = workflow_from_row(r, uri, i)
        if w.workflow_id in seen:
            raise InputError(
                uri, f"duplicate workflow id {w.workflow_id!r} (first at row {seen[w.workflow_id]})", row=i, field="id"
            )
        seen[w.workflow_id] = i
        parsed.append((w, i, nodes_field, edges_field))
    valid: list[Workflow] = []
    rejected: list[RejectedGolden] = []
    for w, i, nodes_field, edges_field in parsed:
        try:
            validate_workflow(w, uri, i, nodes_field, edges_field)
        except InputError as exc:
            if on_invalid == "error":
                raise
            rejected.append(RejectedGolden(w.workflow_id, uri, i, exc.field, exc.problem, w.n_nodes, w))
            continue
        valid.append(w)
    return valid, rejected


def normalize_text(t: str) -> str:
    """Comparison form of a step: NFC, lower case, whitespace collapsed, final ``. ; : !`` dropped."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFC", str(t))).strip().rstrip(".;:!").strip().lower()


def load_goldens_by_source(
    specs: Sequence[str], on_invalid: Literal["error", "collect"] = "error", limit: int | None = None
) -> list[tuple[str, list[Workflow], list[RejectedGolden]]]:
    """:func:`load_goldens` of every spec, as ``(spec, valid, rejected)`` in the order given; a
    workflow id must be unique across them (valid and rejected rows alike) — the same file given
    twice, or two files sharing ids, raise :class:`InputError` naming the later spec, the row (a
    valid workflow's position among the valid ones, a rejected one's file row) and ``id``, before
    anything runs (the goldens table's uniqueness check would fail the run later)."""
    out: list[tuple[str, list[Workflow], list[RejectedGolden]]] = []
    seen: dict[str, str] = {}
    for spec in specs:
        ws, rs = load_goldens(spec, on_invalid=on_invalid, limit=limit)
        ids = [(j, w.workflow_id) for j, w in enumerate(ws, start=1)] + [(r.row, r.workflow_id) for r in rs]
        for j, wid in ids:
            if wid in seen:
                raise InputError(spec, f"workflow {wid!r} was already loaded from {seen[wid]}", row=j, field="id")
            seen[wid] = spec
        out.append((spec, ws, rs))
    return out


def load_all_goldens(
    specs: Sequence[str], on_invalid: Literal["error", "collect"] = "error", limit: int | None = None
) -> tuple[list[Workflow], list[RejectedGolden]]:
    """:func:`load_goldens_by_source` concatenated: every valid workflow and every rejected row
    of ``specs``. Raises as :func:`load_goldens_by_source`."""
    parts = load_goldens_by_source(specs, on_invalid=on_invalid, limit=limit)
    return [w for _, ws, _ in parts for w in ws], [r for _, _, rs in parts for r in rs]
