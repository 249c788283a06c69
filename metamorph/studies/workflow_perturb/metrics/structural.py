"""Structural metrics: Chain F1 and Graph F1 (App. B.2).

Chain F1 (WorFBench ``t_eval_plan``)
------------------------------------
Walk the predicted steps in order and write the gold index each is aligned to (unaligned steps
are skipped); ``L`` = length of the longest strictly increasing subsequence;
``P = L/|pred|``, ``R = L/|gold|``, ``F1 = 2PR/(P+R)`` (:func:`chain_f1`).

Graph F1 (WorFBench ``t_eval_graph``) — exactly what is implemented
-------------------------------------------------------------------
Both graphs get the sentinel nodes START and END, always aligned to each other (WorFBench
adds them as literal node texts, which embed identically). Let ``M`` be the aligned nodes
(sentinels + aligned steps), named by their gold id.

1. Predicted edges with both ends in ``M`` are mapped to gold ids; gold edges are restricted to
   ``M``. ``C`` = directed edges present in **both** (the common edges).
2. ``k`` = number of nodes in the largest connected component of the undirected graph
   ``(M, C)`` (a lone aligned node is a component of size 1).
3. ``P = k / (|pred steps| + 2)``, ``R = k / (|gold steps| + 2)`` (WorFBench counts START and
   END as nodes), ``F1 = 2PR/(P+R)``. Precision/recall are over **nodes**, not edges.

An optional stricter variant (``graph_method="induced"``, not the default) builds a common
*induced* subgraph by iterative pruning: while some ordered pair of nodes in ``M`` has an edge
in exactly one of the two graphs, remove the node with the most such disagreements (ties: a
step before a sentinel, then the larger gold id); then ``k`` = largest connected component of
what is left (all remaining edges agree). Unlike the default it penalises extra edges (e.g. a
redundant transitive edge).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from metamorph.studies.workflow_perturb.metrics.alignment import Alignment
from metamorph.studies.workflow_perturb.metrics.graph import END, START, _clean_edges

GRAPH_METHODS = ("worfbench", "induced")


def longest_increasing_subsequence(seq: Sequence[float]) -> int:
    """Length of the longest strictly increasing subsequence (patience sorting, O(n log n))."""
    tails: list[float] = []
    for x in seq:
        i = bisect_left(tails, x)
        if i == len(tails):
            tails.append(x)
        else:
            tails[i] = x
    return len(tails)


def _prf(hit_p: float, n_p: int, hit_r: float, n_r: int) -> tuple[float, float, float]:
    p = hit_p / n_p if n_p else 0.0
    r = hit_r / n_r if n_r else 0.0
    f = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return p, r, f


def chain_f1(gold_index_by_pred: Sequence[int | None], n_gold: int) -> dict[str, Any]:
    """Chain F1 from the aligned gold index of each predicted step, in predicted order.

    ``gold_index_by_pred[j]`` is the gold index aligned to predicted step ``j`` or ``None``;
    ``|pred| = len(gold_index_by_pred)``. Returns ``precision``, ``recall``, ``f1``, ``lis`` and
    ``reason`` (None when defined normally).
    """
    n_pred = len(gold_index_by_pred)
    if n_gold == 0:
        return {"precision": None, "recall": None, "f1": None, "lis": None, "reason": "empty_gold"}
    if n_pred == 0:
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0, "lis": 0, "reason": "empty_candidate"}
    mapped = [g for g in gold_index_by_pred if g is not None]
    if len(set(mapped)) != len(mapped):
        raise ValueError("a gold step is aligned to two predicted steps")
    if not mapped:
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0, "lis": 0, "reason": "no_aligned_steps"}
    lis = longest_increasing_subsequence(mapped)
    p, r, f = _prf(lis, n_pred, lis, n_gold)
    return {"precision": p, "recall": r, "f1": f, "lis": lis, "reason": None}


def chain_f1_from_alignment(alignment: Alignment) -> dict[str, Any]:
    by_pred = alignment.pred_to_gold
    return chain_f1([by_pred.get(j) for j in range(alignment.n_pred)], alignment.n_gold)


def _largest_component(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> int:
    parent = {v: v for v in nodes}
    if not parent:
        return 0

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in edges:
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[ru] = rv
    sizes: dict[str, int] = {}
    for v in parent:
        r = find(v)
        sizes[r] = sizes.get(r, 0) + 1
    return max(sizes.values())


def _prune_to_common_induced(nodes: set[str], g_edges: set[tuple[str, str]],
                             p_edges: set[tuple[str, str]]) -> set[str]:
    keep = set(nodes)

    def order_key(x: str) -> tuple[int, int]:
        # larger key is removed first among equal disagreement counts: steps before sentinels,
        # then the larger gold id
        return (0, 0) if x in (START, END) else (1, int(x))

    while True:
        dis: dict[str, int] = {v: 0 for v in keep}
        for e in (g_edges ^ p_edges):
            u, v = e
            if u in keep and v in keep:
                dis[u] += 1
                dis[v] += 1
        worst = max(keep, key=lambda x: (dis[x], order_key(x)), default=None)
        if worst is None or dis[worst] == 0:
            return keep
        keep.discard(worst)


def graph_f1(gold_edges: Iterable[Sequence[Any]], pred_edges: Iterable[Sequence[Any]],
             pred_to_gold: Mapping[int, int], n_gold: int, n_pred: int,
             method: str = "worfbench") -> dict[str, Any]:
    """Graph F1 (module docstring) from edges and a step alignment.

    ``pred_to_gold`` maps 0-based predicted step index → 0-based gold step index (node ids are
    those + 1; START/END are aligned implicitly). Returns ``precision``, ``recall``, ``f1``,
    ``common_nodes`` (k, sentinels included), ``common_edges``, ``pred_invalid_edges``, ``reason``.
    """
    if method not in GRAPH_METHODS:
        raise ValueError(f"method must be one of {GRAPH_METHODS}, not {method!r}")
    g_set, _ = _clean_edges(gold_edges, n_gold, strict=True)
    p_set, n_bad = _clean_edges(pred_edges, n_pred, strict=False)
    base = {"pred_invalid_edges": n_bad}
    if n_gold == 0:
        return {"precision": None, "recall": None, "f1": None, "common_nodes": None, "common_edges": None,
                "reason": "empty_gold", **base}
    if n_pred == 0:
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0, "common_nodes": 0, "common_edges": 0,
                "reason": "empty_candidate", **base}
    if not pred_to_gold:
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0, "common_nodes": 0, "common_edges": 0,
                "reason": "no_aligned_steps", **base}
    if len(set(pred_to_gold.values())) != len(pred_to_gold):
        raise ValueError("a gold step is aligned to two predicted steps")
    node_map = {START: START, END: END}
    for p, g in pred_to_gold.items():
        if not (0 <= p < n_pred and 0 <= g < n_gold):
            raise ValueError(f"alignment pair ({p}, {g}) out of range")
        node_map[str(p + 1)] = str(g + 1)
    matched = set(node_map.values())
    mapped_pred = {(node_map[u], node_map[v]) for u, v in p_set if u in node_map and v in node_map}
    gold_in = {(u, v) for u, v in g_set if u in matched and v in matched}
    if method == "induced":
        matched = _prune_to_common_induced(matched, gold_in, mapped_pred)
    common = {(u, v) for u, v in mapped_pred & gold_in if u in matched and v in matched}
    k = _largest_component(matched, common)
    p, r, f = _prf(k, n_pred + 2, k, n_gold + 2)
    return {"precision": p, "recall": r, "f1": f, "common_nodes": k, "common_edges": len(common),
            "reason": None, **base}


def graph_f1_from_alignment(gold_edges: Iterable[Sequence[Any]], pred_edges: Iterable[Sequence[Any]],
                            alignment: Alignment, method: str = "worfbench") -> dict[str, Any]:
    return graph_f1(gold_edges, pred_edges, alignment.pred_to_gold, alignment.n_gold, alignment.n_pred, method)
