"""Structural metrics: Chain F1 and Graph F1 (App. B.2).

Chain F1 (WorFBench ``t_eval_plan``)
------------------------------------
Walk the predicted steps in order and write the gold index each is aligned to (unaligned steps
are skipped); ``L`` = length of the longest strictly increasing subsequence;
``P = L/|pred|``, ``R = L/|gold|``, ``F1 = 2PR/(P+R)`` (:func:`chain_f1`).

Graph F1 — App. B.2 (default, ``method="induced"``)
--------------------------------------------------
No START/END nodes. ``S`` = the gold steps that some predicted step is aligned to (the
alignment of :mod:`~metamorph.studies.workflow_perturb.metrics.alignment`: Hungarian assignment
first, then pairs ≥ τ_align). Predicted step-to-step edges whose two ends are aligned are mapped
to gold ids; edges to or from START/END are ignored on both sides.

1. Prune ``S`` to a common induced subgraph: a node ``v ∈ S`` *disagrees* when its in-neighbours
   or its out-neighbours within ``S`` differ between the gold edges and the mapped predicted
   edges (directed neighbour sets; the graphs are DAGs).
2. ``method="induced"`` (default) removes **one node at a time** — the one with the most
   disagreeing neighbours (size of the symmetric differences of its in- and out-neighbour sets),
   ties → the larger gold index — and re-checks, until no node disagrees.
   ``method="induced_simultaneous"`` removes **every** disagreeing node in each round.
3. ``k = |S|`` after pruning; ``P = k/|V_pred|``, ``R = k/|V_gold|``, ``F1 = 2PR/(P+R)``.

Why one-at-a-time: B.2 step 3 (remove nodes whose neighbour sets differ, repeat until none
does) reads either way. A deleted middle step (gold 1→2→3→4, candidate 1→2→4)
makes both 2 and 4 disagree (the bypass edge 2→4 is not a gold edge): simultaneous pruning drops
both (k = 1 of 3 here), one-at-a-time drops one and the other then agrees (k = 2). On the 300
WorFBench goldens of the shared sample with the deterministic operators and MiniLM
the means at 10/30/50 % were

==================  =====================  =====================  =====================
Graph F1            Missing                Compressed             Description
==================  =====================  =====================  =====================
one-at-a-time       0.805 0.648 0.519      0.771 0.507 0.339      0.990 0.971 0.958
  Δ_avg             0.715                  1.080                  0.080
simultaneous        0.696 0.517 0.415      0.661 0.302 0.154      0.990 0.971 0.958
  Δ_avg             0.702                  1.268                  0.080
paper (§5.1, §6)    0.90 0.76 0.61 (F1s)   Δ 1.04                 Δ 0.29
==================  =====================  =====================  =====================

One-at-a-time is closer to the paper on every reported number (the Missing means and the
Compressed Δ = 1.04); the Description row is the same under both (only the alignment differs
there; the rule-based paraphrases break fewer alignments than the paper's LLM ones).

WorFBench variant (``method="worfbench"``, the earlier default; WorFBench
``t_eval_graph``): both graphs get the sentinel nodes START and END, always aligned to each other;
``M`` = sentinels + aligned steps (gold ids); ``C`` = directed edges in **both** the mapped
predicted edges and the gold edges within ``M``; ``k`` = nodes of the largest connected
component of the undirected ``(M, C)``; ``P = k/(|pred| + 2)``, ``R = k/(|gold| + 2)``.

source: App. B.2 (and §4.1); WorFBench (Qiao et al., ICLR 2025) for the ``worfbench`` variant.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from metamorph.studies.workflow_perturb.metrics.alignment import Alignment
from metamorph.studies.workflow_perturb.metrics.graph import END, START, clean_edges

__all__ = [
    "GRAPH_METHODS",
    "chain_f1",
    "chain_f1_from_alignment",
    "graph_f1",
    "graph_f1_from_alignment",
    "longest_increasing_subsequence",
    "prune_to_common_induced",
]

#: Graph F1 variants (the first is the default; see the module docstring).
GRAPH_METHODS = ("induced", "induced_simultaneous", "worfbench")


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
    """Precision, recall and F1. With equal hit counts F1 = 2PR/(P+R) = 2k/(n_p + n_r), computed in
    that form: one rounding instead of four, so 3 of 3 predicted vs 3 of 5 gold is exactly 0.75
    (2PR/(P+R) gives 0.7499999999999999, which would breach a 0.75 gate)."""
    p = hit_p / n_p if n_p else 0.0
    r = hit_r / n_r if n_r else 0.0
    if hit_p == hit_r and n_p + n_r > 0:
        f = 2 * hit_p / (n_p + n_r)
    else:
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


def _neighbours(nodes: set[str], edges: set[tuple[str, str]]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    inn: dict[str, set[str]] = {v: set() for v in nodes}
    out: dict[str, set[str]] = {v: set() for v in nodes}
    for u, v in edges:
        if u in nodes and v in nodes:
            out[u].add(v)
            inn[v].add(u)
    return inn, out


def prune_to_common_induced(
    nodes: Iterable[str],
    gold_edges: Iterable[tuple[str, str]],
    pred_edges: Iterable[tuple[str, str]],
    simultaneous: bool = False,
) -> set[str]:
    """App. B.2 step 3: prune ``nodes`` (gold ids) until every node has the same in- and
    out-neighbours within the set under ``gold_edges`` and ``pred_edges`` (predicted edges already
    mapped to gold ids). One node per round (most disagreeing neighbours, ties → larger id,
    compared numerically) unless ``simultaneous``. Returns the remaining node set."""
    keep = set(nodes)
    g_set, p_set = set(gold_edges), set(pred_edges)

    def key(x: str) -> tuple[int, int | str]:
        return (0, int(x)) if x.isdigit() else (1, x)

    while keep:
        gi, go = _neighbours(keep, g_set)
        pi, po = _neighbours(keep, p_set)
        dis = {v: len(gi[v] ^ pi[v]) + len(go[v] ^ po[v]) for v in keep}
        bad = [v for v in keep if dis[v] > 0]
        if not bad:
            break
        if simultaneous:
            keep.difference_update(bad)
        else:
            keep.discard(max(bad, key=lambda v: (dis[v], key(v))))
    return keep


def graph_f1(
    gold_edges: Iterable[Sequence[Any]],
    pred_edges: Iterable[Sequence[Any]],
    pred_to_gold: Mapping[int, int],
    n_gold: int,
    n_pred: int,
    method: str = "induced",
) -> dict[str, Any]:
    """Graph F1 (module docstring) from edges and a step alignment.

    ``pred_to_gold`` maps 0-based predicted step index → 0-based gold step index (node ids are
    those + 1). Edge endpoints are ids ``"1"``..``"n"`` (or ints) and START/END; invalid predicted
    edges are dropped and counted, an invalid gold edge raises ``ValueError``. ``method`` is one
    of :data:`GRAPH_METHODS`. Returns ``precision``, ``recall``, ``f1``, ``common_nodes`` (k;
    sentinels included only for ``worfbench``), ``common_edges`` (edges of both graphs among the
    k nodes), ``pred_invalid_edges``, ``reason`` (None when defined normally).

    Raises ``ValueError`` for an unknown method, an out-of-range or non-injective alignment.
    source: App. B.2.
    """
    if method not in GRAPH_METHODS:
        raise ValueError(f"method must be one of {GRAPH_METHODS}, not {method!r}")
    g_set, _ = clean_edges(gold_edges, n_gold, strict=True)
    p_set, n_bad = clean_edges(pred_edges, n_pred, strict=False)
    base = {"pred_invalid_edges": n_bad}
    if n_gold == 0:
        return {
            "precision": None,
            "recall": None,
            "f1": None,
            "common_nodes": None,
            "common_edges": None,
            "reason": "empty_gold",
            **base,
        }
    if n_pred == 0:
        return {
            "precision": 0.0,
            "recall": 0.0,
            "f1": 0.0,
            "common_nodes": 0,
            "common_edges": 0,
            "reason": "empty_candidate",
            **base,
        }
    if not pred_to_gold:
        return {
            "precision": 0.0,
            "recall": 0.0,
            "f1": 0.0,
            "common_nodes": 0,
            "common_edges": 0,
            "reason": "no_aligned_steps",
            **base,
        }
    if len(set(pred_to_gold.values())) != len(pred_to_gold):
        raise ValueError("a gold step is aligned to two predicted steps")
    node_map: dict[str, str] = {}
    for p, g in pred_to_gold.items():
        if not (0 <= p < n_pred and 0 <= g < n_gold):
            raise ValueError(f"alignment pair ({p}, {g}) out of range")
        node_map[str(p + 1)] = str(g + 1)
    if method == "worfbench":
        node_map.update({START: START, END: END})
    matched = set(node_map.values())
    mapped_pred = {(node_map[u], node_map[v]) for u, v in p_set if u in node_map and v in node_map}
    gold_in = {(u, v) for u, v in g_set if u in matched and v in matched}
    if method == "worfbench":
        common = mapped_pred & gold_in
        k = _largest_component(matched, common)
        p, r, f = _prf(k, n_pred + 2, k, n_gold + 2)
        return {
            "precision": p,
            "recall": r,
            "f1": f,
            "common_nodes": k,
            "common_edges": len(common),
            "reason": None,
            **base,
        }
    keep = prune_to_common_induced(matched, gold_in, mapped_pred, simultaneous=(method == "induced_simultaneous"))
    k = len(keep)
    common = {(u, v) for u, v in gold_in if u in keep and v in keep}
    p, r, f = _prf(k, n_pred, k, n_gold)
    return {
        "precision": p,
        "recall": r,
        "f1": f,
        "common_nodes": k,
        "common_edges": len(common),
        "reason": None if k else "no_common_subgraph",
        **base,
    }


def graph_f1_from_alignment(
    gold_edges: Iterable[Sequence[Any]],
    pred_edges: Iterable[Sequence[Any]],
    alignment: Alignment,
    method: str = "induced",
) -> dict[str, Any]:
    """:func:`graph_f1` of an :class:`~metamorph.studies.workflow_perturb.metrics.alignment.Alignment`."""
    return graph_f1(gold_edges, pred_edges, alignment.pred_to_gold, alignment.n_gold, alignment.n_pred, method)
