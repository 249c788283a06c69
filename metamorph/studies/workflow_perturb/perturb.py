"""WorkflowPerturb perturbations (Kanda et al., arXiv:2602.17990 §3.1 and App. A).

Three perturbation types, each at the severities p ∈ :data:`SEVERITIES` = {0.1, 0.3, 0.5}:

* ``missing`` (Missing Steps): N steps are removed; each removed step's predecessors are linked to
  its successors.
* ``compressed`` (Compressed Steps): N steps are merged into a neighbouring step, so the workflow
  has N fewer nodes and the merged node describes both steps.
* ``description`` (Description Changes): N step descriptions are reworded; the graph is unchanged.

**N, the number of steps to alter** (:func:`n_to_alter`): ``N = max(1, ceil(p·n))`` (``p·n``
first rounded to 9 decimals so 0.3·10 is 3, not 3.0000…4), capped at ``n − 1`` so at least one
step stays untouched. With n = 5: N = 1, 2, 3 at p = 0.1, 0.3, 0.5. The paper (§3.1, A.2) does
not say how p·n is rounded; ceil is the reading that reproduces its BERTScore windows (§5.1: the
mean of min(|gold|, |pred|) under Missing Steps is 5.5 → 4.1 → 3.0): on the 300 WorFBench
goldens of the shared sample ceil gives 5.47 → 4.03 → 2.92, round-half-up 5.51 → 4.39 → 2.92
and floor 5.51 → 5.02 → 3.59. ``rounding="half_up"`` keeps the earlier rule as an option.

**Contiguity** (App. B.4 relies on perturbations acting on contiguous steps and keeping the
order of the rest): every deterministic operator alters a run of consecutive steps in the
workflow's topological order (:func:`step_order`; the list order for every WorFBench golden),
chosen uniformly among the possible start positions.

**Target score** (§3.1, :func:`target_score`): ``1 − p`` for missing and compressed, ``1.0`` for
description changes (the workflow still means the same thing).

Two generators fill the same :class:`Perturbation` record:

1. Deterministic operators (no LLM, seeded): :func:`remove_steps`, :func:`compress_steps`,
   :func:`paraphrase_steps` (and :func:`perturb_deterministic` picking N and the seed per row).
2. The LLM generator on the plan of App. A: :mod:`metamorph.studies.workflow_perturb.generate`
   (:func:`~metamorph.studies.workflow_perturb.generate.generate_perturbation`), checked by the
   static validation here (:func:`check_variant`).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from metamorph.studies.workflow_perturb.paraphrase import paraphrase_text

from metamorph.studies.workflow_perturb.validate import check_type, check_variant

# the perturbation vocabulary (declared in .vocab) is re-exported here, where readers look for it
from metamorph.studies.workflow_perturb.vocab import PERTURBATION_TYPES, SEVERITIES, TYPE_NAMES
from metamorph.studies.workflow_perturb.workflows import (
    END,
    START,
    Edge,
    Workflow,
    edge_sort_key,
    format_workflow,
)

__all__ = [
    "N_ROUNDING",
    "PERTURBATION_TYPES",
    "SELECTIONS",
    "SEVERITIES",
    "TYPE_NAMES",
    "Perturbation",
    "check_n_altered",
    "compress_steps",
    "compression_groups",
    "contiguous_run",
    "merge_text",
    "n_to_alter",
    "paraphrase_steps",
    "perturb_deterministic",
    "remove_nodes",
    "remove_steps",
    "row_seed",
    "step_order",
    "target_score",
    "variant_id",
    "variant_workflow",
]


#: Rounding rules of p·n in :func:`n_to_alter` (the first is the default).
N_ROUNDING = ("ceil", "half_up")


def n_to_alter(p: float, n_nodes: int, rounding: str = "ceil") -> int:
    """Number of steps N to alter at severity ``p`` in a workflow of ``n_nodes`` steps.

    ``rounding="ceil"`` (default): ``N = min(n_nodes − 1, max(1, ceil(p·n_nodes)))``;
    ``rounding="half_up"``: ``floor(p·n_nodes + 1/2)`` instead of the ceiling (the earlier
    rule). ``p·n`` is rounded to 9 decimals first. Table (ceil): n=5 → 1, 2, 3; n=6 → 1, 2, 3;
    n=7 → 1, 3, 4; n=16 → 2, 5, 8 for p = 0.1, 0.3, 0.5 (half_up: n=7 → 1, 2, 4; n=6 → 1, 2, 3).
    Raises ``ValueError`` unless ``0 < p < 1``, ``n_nodes >= 2`` and ``rounding`` is in
    :data:`N_ROUNDING`.

    source: §3.1 and A.2 (N = p·|V|); ceil chosen by §5.1's BERTScore windows (module docstring).
    """
    if not 0 < p < 1:
        raise ValueError(f"severity p must be in (0, 1), got {p}")
    if n_nodes < 2:
        raise ValueError(f"a workflow needs at least 2 steps to be perturbed, got {n_nodes}")
    x = round(p * n_nodes, 9)
    if rounding == "ceil":
        n = math.ceil(x)
    elif rounding == "half_up":
        n = math.floor(x + 0.5)
    else:
        raise ValueError(f"rounding must be one of {N_ROUNDING}, not {rounding!r}")
    return min(n_nodes - 1, max(1, n))


def step_order(w: Workflow) -> list[str]:
    """The workflow's step ids in topological order, ties broken by list position (Kahn's
    algorithm with a min-heap). Equals ``w.node_ids`` when every step-to-step edge goes from a
    smaller to a larger id (true of every WorFBench golden). Raises ``ValueError`` on a cycle."""
    import heapq

    pos = {k: i for i, k in enumerate(w.node_ids)}
    succ: dict[str, set[str]] = {k: set() for k in w.node_ids}
    indeg = {k: 0 for k in w.node_ids}
    for u, v in set(w.edges):
        if u in pos and v in pos and v not in succ[u]:
            succ[u].add(v)
            indeg[v] += 1
    heap = [pos[k] for k in w.node_ids if indeg[k] == 0]
    heapq.heapify(heap)
    out: list[str] = []
    while heap:
        k = w.node_ids[heapq.heappop(heap)]
        out.append(k)
        for v in succ[k]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, pos[v])
    if len(out) != len(w.node_ids):
        raise ValueError(f"workflow {w.workflow_id!r} has a cycle")
    return out


def contiguous_run(w: Workflow, length: int, rng: random.Random) -> list[str]:
    """``length`` consecutive step ids of :func:`step_order`, starting at
    ``rng.randrange(n − length + 1)`` (uniform over the possible starts)."""
    order = step_order(w)
    if not 1 <= length <= len(order):
        raise ValueError(f"run length must be in 1..{len(order)}, got {length}")
    start = rng.randrange(len(order) - length + 1)
    return order[start : start + length]


def target_score(ptype: str, p: float) -> float:
    """The §3.1 target: ``1 − p`` for missing/compressed, ``1.0`` for description changes."""
    check_type(ptype)
    return 1.0 if ptype == "description" else round(1.0 - p, 10)


def variant_id(golden_id: str, ptype: str, p: float | None, n: int | None = None) -> str:
    """Id of a perturbed variant: ``<golden id>::<type>@<p in percent>`` (``@n<N>`` without p)."""
    return f"{golden_id}::{ptype}@{round(p * 100)}" if p is not None else f"{golden_id}::{ptype}@n{n}"


def row_seed(golden_id: str, ptype: str, p: float, seed: int = 0) -> int:
    """A stable per-row seed (sha256 of ``id|type|p|seed``; not Python's salted ``hash``)."""
    digest = hashlib.sha256(f"{golden_id}|{ptype}|{p}|{seed}".encode()).hexdigest()
    return int(digest[:16], 16)


@dataclass(frozen=True, kw_only=True)
class Perturbation:
    """One perturbed variant of a golden workflow (one row of the study's perturbation table).

    Attributes:
        workflow: the perturbed workflow (id :func:`variant_id`); ``None`` when an LLM reply never
            parsed.
        type: ``missing`` / ``compressed`` / ``description``.
        p: severity (``None`` when an operator was called with an explicit N only).
        n_altered: N, the number of steps the variant was asked to alter.
        altered_node_ids: golden node ids that were removed (missing), took part in a merge
            (compressed) or were reworded (description); for LLM replies, read off the reply.
        operator: ``deterministic`` or ``llm`` (the generator).
        golden_id: id of the golden workflow.
        method: what produced it: ``remove_steps`` / ``compress_steps`` / ``paraphrase_steps``,
            ``llm`` (whole-workflow reply) or ``llm_hybrid`` (per-node fallback, A.10).
        model: the model of the last call (``None`` for deterministic rows).
        models_tried: models called, in escalation order.
        attempts: model calls made for this row (0 for deterministic rows).
        call_errors: those of ``attempts`` that failed at the provider (no reply).
        status: ``valid`` or ``invalid`` (static validation, :func:`check_variant`), or
            ``call_error`` when every attempt failed at the provider.
        failure: the residual validation failure of an invalid row, else ``None``.
        raw_output: the last model reply (LLM rows).
    """

    workflow: Workflow | None
    type: str
    p: float | None
    n_altered: int
    altered_node_ids: tuple[str, ...]
    operator: str = "deterministic"
    golden_id: str
    method: str
    model: str | None = None
    models_tried: tuple[str, ...] = ()
    attempts: int = 0
    call_errors: int = 0
    status: str = "valid"
    failure: str | None = None
    raw_output: str | None = None

    @property
    def target_score(self) -> float | None:
        """:func:`target_score` of the row (``None`` without a severity)."""
        return None if self.p is None else target_score(self.type, self.p)

    @property
    def variant_id(self) -> str:
        return variant_id(self.golden_id, self.type, self.p, self.n_altered)

    def to_row(self) -> dict[str, Any]:
        """A flat dict for a DataFrame: lineage, record fields, and the variant as JSON/text."""
        w = self.workflow
        return {
            "variant_id": self.variant_id,
            "golden_id": self.golden_id,
            "type": self.type,
            "p": self.p,
            "n_altered": self.n_altered,
            "altered_node_ids": json.dumps(list(self.altered_node_ids)),
            "target_score": self.target_score,
            "operator": self.operator,
            "method": self.method,
            "model": self.model,
            "models_tried": json.dumps(list(self.models_tried)),
            "attempts": self.attempts,
            "n_call_errors": self.call_errors,
            "status": self.status,
            "failure": self.failure,
            "n_nodes": None if w is None else w.n_nodes,
            "nodes_json": None if w is None else json.dumps(list(w.nodes), ensure_ascii=False),
            "edges_json": None if w is None else json.dumps([list(e) for e in w.edges]),
            "workflow_text": None if w is None else format_workflow(w),
            "raw_output": self.raw_output,
        }


def _adjacency(edges: Sequence[Edge]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    succ: dict[str, set[str]] = {}
    pred: dict[str, set[str]] = {}
    for u, v in edges:
        succ.setdefault(u, set()).add(v)
        pred.setdefault(v, set()).add(u)
        succ.setdefault(v, set())
        pred.setdefault(u, set())
    return succ, pred


def _edge_set(succ: dict[str, set[str]]) -> set[Edge]:
    return {(u, v) for u, vs in succ.items() for v in vs}


def _renumber(
    order: Sequence[str], texts: dict[str, str], edges: set[Edge]
) -> tuple[tuple[str, ...], tuple[Edge, ...]]:
    """Nodes kept in ``order`` become 1..m; edges are remapped, deduplicated and sorted
    (:func:`~metamorph.studies.workflow_perturb.workflows.edge_sort_key`: START first, ids numerically, END last)."""
    new = {old: str(i) for i, old in enumerate(order, start=1)}
    mapped = {(new.get(u, u), new.get(v, v)) for u, v in edges}
    return tuple(texts[k] for k in order), tuple(sorted(mapped, key=edge_sort_key))


def _drop_start_end(edges: set[Edge]) -> set[Edge]:
    """A direct (START, END) edge carries no step: drop it unless it is START's only outgoing or
    END's only incoming edge (then it keeps the graph's START/END rules satisfied)."""
    if (START, END) in edges:
        others_out = any(u == START and v != END for u, v in edges)
        others_in = any(v == END and u != START for u, v in edges)
        if others_out and others_in:
            edges = edges - {(START, END)}
    return edges


def variant_workflow(
    w: Workflow, ptype: str, p: float | None, n: int, nodes: tuple[str, ...], edges: tuple[Edge, ...]
) -> Workflow:
    """The variant of golden ``w`` with ``nodes`` and ``edges``, named by :func:`variant_id`."""
    return Workflow(variant_id(w.workflow_id, ptype, p, n), w.task, nodes, edges, w.source)


def check_n_altered(w: Workflow, n: int) -> None:
    """Raise ``ValueError`` unless ``1 <= n <= |V| - 1`` steps of ``w`` can be altered."""
    if not 1 <= n <= w.n_nodes - 1:
        raise ValueError(f"workflow {w.workflow_id!r} has {w.n_nodes} steps; N must be in 1..{w.n_nodes - 1}, got {n}")


def remove_nodes(w: Workflow, node_ids: Sequence[str]) -> tuple[tuple[str, ...], tuple[Edge, ...]]:
    """Remove ``node_ids`` from ``w`` and bypass each one (the Missing Steps operator's core).

    Nodes are removed one at a time in id order; removing v adds an edge p → s for every
    predecessor p and successor s of v (so a path through removed steps becomes a direct edge and
    the graph stays a DAG with START/END intact). A resulting (START, END) edge is dropped unless
    it is START's only outgoing or END's only incoming edge. The remaining nodes keep their order
    and are renumbered 1..m; edges are deduplicated and sorted (START first, END last).

    Returns ``(nodes, edges)``. Raises ``ValueError`` for an unknown id.
    """
    ids = sorted(set(node_ids), key=int)
    unknown = [i for i in ids if i not in w.node_ids]
    if unknown:
        raise ValueError(f"unknown node id(s) {unknown} in workflow {w.workflow_id!r}")
    succ, pred = _adjacency(w.edges)
    for v in ids:
        ps, ss = pred.pop(v, set()), succ.pop(v, set())
        for x in ps:
            succ[x].discard(v)
        for y in ss:
            pred[y].discard(v)
        for x in ps:
            for y in ss:
                if x != y:
                    succ[x].add(y)
                    pred[y].add(x)
    edges = _drop_start_end(_edge_set(succ))
    keep = [k for k in w.node_ids if k not in ids]
    return _renumber(keep, dict(zip(w.node_ids, w.nodes)), edges)


#: How the deterministic operators choose the steps they alter (the first is the default).
SELECTIONS = ("contiguous", "scattered")


def _check_selection(selection: str) -> None:
    if selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {SELECTIONS}, not {selection!r}")


def _chosen_ids(w: Workflow, n: int, rng: random.Random, selection: str) -> tuple[str, ...]:
    """The ``n`` step ids an operator alters, in id order: :func:`contiguous_run` or a
    ``rng.sample`` (``selection="scattered"``); checks ``n`` and ``selection``."""
    check_n_altered(w, n)
    _check_selection(selection)
    chosen = contiguous_run(w, n, rng) if selection == "contiguous" else rng.sample(list(w.node_ids), n)
    return tuple(sorted(chosen, key=int))


def remove_steps(
    w: Workflow, n: int, rng: random.Random, *, p: float | None = None, selection: str = "contiguous"
) -> Perturbation:
    """Missing Steps (§3.1): remove ``n`` steps and reconnect predecessors to successors
    (:func:`remove_nodes`).

    ``selection="contiguous"`` (default, App. B.4): the run :func:`contiguous_run` of ``n``
    steps; ``"scattered"`` (the earlier rule): ``rng.sample`` of the ids.
    Raises ``ValueError`` unless ``1 <= n <= w.n_nodes - 1`` and ``selection`` is known.

    source: §3.1, App. B.4 (contiguity).
    """
    ids = _chosen_ids(w, n, rng, selection)
    nodes, edges = remove_nodes(w, ids)
    return _deterministic(w, "missing", p, n, ids, "remove_steps", nodes, edges)


def merge_text(first: str, second: str, parallel: bool = False) -> str:
    """Text of a merged step: ``"<first>; then <second>"`` (``"; also "`` for two parallel steps);
    trailing ``.``/``;`` and whitespace of ``first`` are dropped, ``second`` is kept as written.
    Example: ``merge_text("Click File.", "Click Open.") == "Click File; then Click Open."``."""
    return f"{first.rstrip().rstrip('.;').rstrip()}; {'also' if parallel else 'then'} {second.strip()}"


def _has_other_path(succ: dict[str, set[str]], u: str, v: str) -> bool:
    """Whether v is reachable from u without using the edge u → v."""
    stack = [x for x in succ[u] if x != v]
    seen = set(stack)
    while stack:
        x = stack.pop()
        if x == v:
            return True
        for y in succ.get(x, ()):
            if y not in seen:
                seen.add(y)
                stack.append(y)
    return False


def compression_groups(run: Sequence[str], n: int) -> list[list[str]]:
    """Split a run of ``len(run)`` consecutive steps into ``len(run) − n`` consecutive groups of
    at least two steps, sizes as equal as possible, the larger groups first.
    Example: 6 steps, n = 3 → [[1, 2], [3, 4], [5, 6]]; 5 steps, n = 3 → [[1, 2, 3], [4, 5]]."""
    k = len(run) - n
    if k < 1 or len(run) < 2 * k:
        raise ValueError(f"cannot merge {len(run)} steps into {k} groups of at least two")
    base, extra = divmod(len(run), k)
    out, i = [], 0
    for g in range(k):
        size = base + (1 if g < extra else 0)
        out.append(list(run[i : i + size]))
        i += size
    return out


def compress_steps(
    w: Workflow, n: int, rng: random.Random, *, p: float | None = None, selection: str = "contiguous"
) -> Perturbation:
    """Compressed Steps (§3.1): merge steps so that the workflow has ``n`` fewer nodes.

    ``selection="contiguous"`` (default, App. B.4 and the A.1 few-shot example, which merges
    1+2 and 4+5 of five steps): a run of ``L = min(n_nodes, 2n)`` consecutive steps
    (:func:`contiguous_run`) is split into ``L − n`` consecutive groups
    (:func:`compression_groups`: pairs when ``2n <= n_nodes``), and each group becomes one node at
    its first step's position, with the text :func:`merge_text` of its members in order
    (``"; also "`` between two members without an edge between them) and the union of the
    members' outside edges. Merging consecutive steps of a topological order never makes a cycle.

    ``selection="scattered"`` (the earlier rule): ``n`` times, merge one step into a
    neighbour (edge contraction), picking uniformly (``rng.randrange``) among candidate pairs,
    sorted by position:

    Each merge picks uniformly (``rng.randrange``) among candidate pairs, sorted by position:

    1. chain-adjacent pairs u → v (u's only successor is v and v's only predecessor is u): the
       merged node has u's predecessors and v's successors;
    2. if there is none, any step-to-step edge u → v with no other path u ⇝ v (contracting it
       keeps the graph acyclic); the merged node has the union of both ends' other edges;
    3. if there is no step-to-step edge at all (every step hangs off START/END), two steps adjacent
       in id order, merged as parallel steps.

    The merged node takes the earlier position and the text :func:`merge_text` (predecessor
    first; a node can absorb several steps: ``"A; then B; then C"``). After ``n`` merges the
    workflow has ``n_nodes − n`` nodes, renumbered 1..m. ``altered_node_ids`` are the golden ids
    inside merged nodes. Raises ``ValueError`` unless ``1 <= n <= w.n_nodes - 1`` and
    ``selection`` is known.

    source: §3.1, A.1 (example), App. B.4 (contiguity).
    """
    check_n_altered(w, n)
    _check_selection(selection)
    if selection == "contiguous":
        return _compress_contiguous(w, n, rng, p)
    succ, pred = _adjacency(w.edges)
    order = list(w.node_ids)
    texts = dict(zip(w.node_ids, w.nodes))
    members = {k: [k] for k in order}
    for _ in range(n):
        pos = {k: i for i, k in enumerate(order)}
        real = [(u, v) for u in order for v in sorted(succ.get(u, ()), key=lambda x: pos.get(x, -1)) if v in pos]
        chain = [(u, v) for u, v in real if succ[u] == {v} and pred[v] == {u}]
        parallel = False
        if chain:
            cands = chain
        elif real:
            cands = [(u, v) for u, v in real if not _has_other_path(succ, u, v)]
        else:
            cands = [(order[i], order[i + 1]) for i in range(len(order) - 1)]
            parallel = True
        u, v = cands[rng.randrange(len(cands))]
        keep, gone = (u, v) if pos[u] < pos[v] else (v, u)
        texts[keep] = merge_text(texts[u], texts[v], parallel)
        members[keep] = sorted(members[u] + members[v], key=int)
        # contract: every edge of `gone` moves to `keep`; the edge between them disappears
        for x in pred.pop(gone, set()):
            succ[x].discard(gone)
            if x != keep:
                succ[x].add(keep)
                pred[keep].add(x)
        for y in succ.pop(gone, set()):
            pred[y].discard(gone)
            if y != keep:
                pred[y].add(keep)
                succ[keep].add(y)
        order.remove(gone)
        del members[gone]
    nodes, edges = _renumber(order, texts, _edge_set(succ))
    altered = tuple(sorted((g for k in order if len(members[k]) > 1 for g in members[k]), key=int))
    return _deterministic(w, "compressed", p, n, altered, "compress_steps", nodes, edges)


def _compress_contiguous(w: Workflow, n: int, rng: random.Random, p: float | None) -> Perturbation:
    run = contiguous_run(w, min(w.n_nodes, 2 * n), rng)
    groups = compression_groups(run, n)
    edges = set(w.edges)
    texts = dict(zip(w.node_ids, w.nodes))
    rep: dict[str, str] = {}
    for grp in groups:
        text = texts[grp[0]]
        for a, b in zip(grp, grp[1:]):
            text = merge_text(text, texts[b], parallel=(a, b) not in edges)
        texts[grp[0]] = text
        for g in grp:
            rep[g] = grp[0]
    mapped = {(rep.get(u, u), rep.get(v, v)) for u, v in edges}
    mapped = {(u, v) for u, v in mapped if u != v}
    keep = [k for k in w.node_ids if rep.get(k, k) == k]
    nodes, new_edges = _renumber(keep, texts, mapped)
    altered = tuple(sorted(run, key=int))
    return _deterministic(w, "compressed", p, n, altered, "compress_steps", nodes, new_edges)


def paraphrase_steps(
    w: Workflow, n: int, rng: random.Random, *, p: float | None = None, selection: str = "contiguous"
) -> Perturbation:
    """Description Changes (§3.1): reword ``n`` steps with :func:`paraphrase_text`; the graph
    and every other step are unchanged. ``selection="contiguous"`` (default, App. B.4): the run
    :func:`contiguous_run`; ``"scattered"``: ``rng.sample`` of the ids.

    Raises ``ValueError`` unless ``1 <= n <= w.n_nodes - 1`` and ``selection`` is known.

    source: §3.1, App. B.4 (contiguity).
    """
    ids = _chosen_ids(w, n, rng, selection)
    nodes = tuple(paraphrase_text(t) if k in ids else t for k, t in zip(w.node_ids, w.nodes))
    return _deterministic(w, "description", p, n, ids, "paraphrase_steps", nodes, w.edges)


_OPERATORS = {"missing": remove_steps, "compressed": compress_steps, "description": paraphrase_steps}


def _deterministic(
    w: Workflow,
    ptype: str,
    p: float | None,
    n: int,
    altered: tuple[str, ...],
    method: str,
    nodes: tuple[str, ...],
    edges: tuple[Edge, ...],
) -> Perturbation:
    """Wrap an operator's output, running the same static validation as for LLM replies."""
    problem = check_variant(w, ptype, n, nodes, edges)
    return Perturbation(
        workflow=variant_workflow(w, ptype, p, n, nodes, edges),
        type=ptype,
        p=p,
        n_altered=n,
        altered_node_ids=altered,
        operator="deterministic",
        golden_id=w.workflow_id,
        method=method,
        status="valid" if problem is None else "invalid",
        failure=problem,
    )


def perturb_deterministic(
    w: Workflow, ptype: str, p: float, seed: int = 0, *, selection: str = "contiguous", rounding: str = "ceil"
) -> Perturbation:
    """Apply the deterministic operator of ``ptype`` at severity ``p``: N = :func:`n_to_alter`
    (``rounding``), rng = ``random.Random(row_seed(w.workflow_id, ptype, p, seed))`` — the same
    row always gives the same variant, independent of which other rows are generated.
    ``selection`` as in :func:`remove_steps`. source: §3.1, App. B.4."""
    check_type(ptype)
    rng = random.Random(row_seed(w.workflow_id, ptype, p, seed))
    return _OPERATORS[ptype](w, n_to_alter(p, w.n_nodes, rounding), rng, p=p, selection=selection)
