"""Workflow-evaluation metrics of the WorkflowPerturb study (issue #4).

Paper: "WorkflowPerturb: Calibrated Stress Tests for Evaluating Multi-Agent Workflow Metrics"
(Kanda et al., arXiv 2602.17990), §4 and App. B. The structural metrics follow WorFBench's
WorFEval (Qiao et al., ICLR 2025; reference code ``evaluator/graph_evaluator.py``); every place
where this module differs from that reference code is listed under *Deviations* below.

Inputs
------
A workflow is a list of step descriptions (nodes ``"1"``..``"n"`` in list order) plus directed
edges between node ids, including the sentinels ``"START"`` and ``"END"``
(:class:`WorkflowGraph`; :func:`as_workflow` also accepts any object with ``nodes``/``edges``
attributes such as ``metamorph.workflows.Workflow``, ``(nodes, edges)``, a dict with
``nodes``/``edges``, or a bare list of steps = a linear chain START→1→…→n→END). Edge ids may
be ``str`` or ``int`` (1..n); ``"start"``/``"end"`` are case-insensitive. Gold edges that name
an unknown node or are self-loops raise ``ValueError``; such *predicted* edges are dropped and
counted (``pred_invalid_edges``). Duplicate edges count once.

Alignment (App. B)
------------------
Both step lists are embedded (L2-normalised, :mod:`metamorph.embeddings`);
``sim[i, j] = cos(gold[i], pred[j])`` (**rows = gold, columns = pred**). A one-to-one
assignment maximising the total similarity is found with
:func:`scipy.optimize.linear_sum_assignment` and pairs with ``sim >= tau_align`` (0.8,
inclusive; compared in float64, no tolerance) are kept (:func:`align`).
By default (``prefilter=True``) entries below ``tau_align`` are set to 0 *before* the
assignment, so the assignment is a maximum-weight matching over eligible pairs only — the
same as WorFBench's ``nx.max_weight_matching`` over above-threshold pairs. With
``prefilter=False`` the assignment runs on the raw matrix and is filtered afterwards (the
literal reading of "assign, then keep pairs ≥ τ"); that variant can lose an eligible pair
because the raw optimum used a sub-threshold one (tested). Exact ties are broken towards
order-preserving pairs (a ``1e-9·|i/n_gold − j/n_pred|`` penalty in the objective only;
thresholds use the raw similarity), so duplicated step texts align in order.

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

Lexical: BLEU / GLEU
--------------------
Tokens: each step is lower-cased (``lowercase=True``, the default: capitalisation of a step's
first word is not content) and tokenised with ``nltk.tokenize.NLTKWordTokenizer`` (needs no
NLTK data); the step token lists are concatenated in order. This equals tokenising the
whitespace-joined text except that each step's sentence-final period is split off (the
tokenizer only splits a period at the end of its input; ``nltk.word_tokenize`` would do the same
after its punkt sentence split, whose data is not available here).
BLEU = ``sentence_bleu([gold_tokens], pred_tokens, smoothing_function=SmoothingFunction().method1)``
(default 4-gram uniform weights; note an identical text of < 4 tokens scores < 1 under nltk);
GLEU = ``sentence_gleu([gold_tokens], pred_tokens)``.

Semantic: BERTScore
-------------------
``bert_score.BERTScorer`` on the local encoder directory (``model_type=<path>``,
``num_layers`` = the encoder's last layer, e.g. 6 for MiniLM-L6), ``idf=False``,
``rescale_with_baseline=False`` (the baseline files are not local). Order-preserving truncation:
pairs ``(gold[i], pred[i])`` for ``i < min(|gold|, |pred|)``; the score is the mean F1 over those
pairs. Model name/path, layer and ``rescaled=False`` are recorded in every result.

Ordering: Kendall's τ
---------------------
``scipy.stats.kendalltau`` (τ-b) between the gold indices and the predicted indices of the
aligned pairs (:func:`kendall_tau`).

LLM-as-Judge (App. B.6)
-----------------------
:data:`JUDGE_RUBRIC` (levels 0–5 with anchor cases), :func:`judge_messages`,
:func:`parse_judge_score` and :func:`judge_score` (mean of valid replies / 5 over
:data:`JUDGE_N_CALLS` = 3 calls).

Edge-case conventions
---------------------
* **Empty gold** (no steps): every metric is ``None`` with reason ``"empty_gold"``.
* **Empty candidate** (no steps): Chain/Graph F1, BLEU, GLEU and BERTScore are ``0.0`` (reason
  ``"empty_candidate"``); never an exception. Kendall's τ is ``None`` (undefined, < 2 aligned
  steps).
* **Zero aligned steps**: Chain F1 = Graph F1 = 0 (reason ``"no_aligned_steps"``) — WorFBench's
  code would give Chain ``L = 1`` (its DP starts at 1) and Graph ``k ≥ 1`` (the sentinels).
* **Token-less text** (only whitespace/punctuation: no token contains a letter or digit): a
  token-less candidate scores BLEU = GLEU = 0.0 (``"candidate_without_tokens"``); a token-less
  gold gives ``None`` (``"gold_without_tokens"``). Neither can produce a false 1.0 (nltk gives
  GLEU = 1.0 for ``"..."`` vs ``"..."``).
* **Kendall's τ** with fewer than 2 aligned steps, or constant ranks, is undefined: ``None`` with
  a reason, never NaN (so it can never poison a mean).
* **Judge**: a truncated (``finish_reason`` length/max_tokens), errored, unparseable or
  out-of-range reply is excluded and counted as invalid, never scored 0; all invalid → None.

Deviations from WorFBench's reference code (deliberate)
-------------------------------------------------------
* Alignment: τ = 0.8 inclusive (WorFBench: > 0.6), solved with ``linear_sum_assignment``.
* Graph F1 compares edges **through the alignment** (WorFBench compares raw predicted indices
  with gold indices, which is only right when the alignment is the identity).
* Chain F1 uses the gold list order; WorFBench takes the best over ≤ 20 topological sorts of the
  gold graph when it has < 10 nodes (identical for chain-shaped gold workflows).
* The zero-aligned conventions above.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "GRAPH_METHODS",
    "JUDGE_MAX_SCORE",
    "JUDGE_N_CALLS",
    "JUDGE_RUBRIC",
    "TAU_ALIGN",
    "Alignment",
    "WorkflowGraph",
    "align",
    "as_workflow",
    "bertscore_f1",
    "bleu",
    "chain_edges",
    "chain_f1",
    "chain_f1_from_alignment",
    "get_bert_scorer",
    "gleu",
    "graph_f1",
    "graph_f1_from_alignment",
    "judge_messages",
    "judge_score",
    "kendall_tau",
    "kendall_tau_from_alignment",
    "lexical_tokens",
    "longest_increasing_subsequence",
    "parse_judge_score",
    "score_workflow",
    "score_workflows",
    "similarity_matrix",
]

TAU_ALIGN = 0.8
START, END = "START", "END"
GRAPH_METHODS = ("worfbench", "induced")
JUDGE_N_CALLS = 3
JUDGE_MAX_SCORE = 5
_TIE_EPS = 1e-9


# --------------------------------------------------------------------------- workflows


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
    :class:`metamorph.workflows.Workflow`), ``(nodes, edges)``, ``{"nodes", "edges"}`` or a list of steps.

    ``edges`` of ``None`` (or a bare list of steps) means the linear chain :func:`chain_edges`.
    Edge endpoints are kept as given here; they are checked by the graph metric.
    """
    if isinstance(obj, WorkflowGraph):
        return obj
    if hasattr(obj, "nodes") and hasattr(obj, "edges"):  # e.g. metamorph.workflows.Workflow
        nodes, edges = obj.nodes, obj.edges
    elif isinstance(obj, Mapping):
        nodes, edges = obj.get("nodes", ()), obj.get("edges")
    elif isinstance(obj, str):
        raise TypeError("a workflow is a list of steps, not a single string")
    elif isinstance(obj, tuple) and len(obj) == 2 and not isinstance(obj[0], str):
        nodes, edges = obj
    else:
        nodes, edges = obj, None
    nodes = tuple("" if s is None else str(s) for s in (nodes or ()))
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


def _clean_edges(edges: Iterable[Sequence[Any]], n: int, *, strict: bool) -> tuple[set[tuple[str, str]], int]:
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


# --------------------------------------------------------------------------- alignment


@dataclass(frozen=True)
class Alignment:
    """Aligned ``(gold_index, pred_index, similarity)`` triples (0-based), sorted by pred index."""

    pairs: tuple[tuple[int, int, float], ...]
    n_gold: int
    n_pred: int
    tau: float = TAU_ALIGN

    @property
    def pred_to_gold(self) -> dict[int, int]:
        return {p: g for g, p, _ in self.pairs}

    @property
    def gold_to_pred(self) -> dict[int, int]:
        return {g: p for g, p, _ in self.pairs}

    def __len__(self) -> int:
        return len(self.pairs)


def similarity_matrix(gold_vecs: np.ndarray, pred_vecs: np.ndarray) -> np.ndarray:
    """Cosine similarities, rows = gold, columns = pred (vectors are normalised here again)."""
    g = np.asarray(gold_vecs, dtype=np.float64)
    p = np.asarray(pred_vecs, dtype=np.float64)
    if g.size == 0 or p.size == 0:
        return np.zeros((g.shape[0] if g.ndim == 2 else 0, p.shape[0] if p.ndim == 2 else 0))
    g = g / np.clip(np.linalg.norm(g, axis=1, keepdims=True), 1e-12, None)
    p = p / np.clip(np.linalg.norm(p, axis=1, keepdims=True), 1e-12, None)
    return g @ p.T


def align(sim: Any, tau: float = TAU_ALIGN, *, prefilter: bool = True) -> Alignment:
    """One-to-one alignment on ``sim`` (rows = gold, columns = pred), keeping pairs with ``sim >= tau``.

    See the module docstring for ``prefilter`` and the order-preserving tie-break.
    """
    from scipy.optimize import linear_sum_assignment

    s = np.asarray(sim, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"similarity matrix must be 2-D, got shape {s.shape}")
    n_gold, n_pred = s.shape
    if n_gold == 0 or n_pred == 0:
        return Alignment((), n_gold, n_pred, tau)
    if not np.all(np.isfinite(s)):
        raise ValueError("similarity matrix contains NaN or inf")
    eligible = s >= tau
    weights = np.where(eligible, s, 0.0) if prefilter else s.copy()
    gi = np.arange(n_gold)[:, None] / n_gold
    pj = np.arange(n_pred)[None, :] / n_pred
    weights = weights - _TIE_EPS * np.abs(gi - pj)
    rows, cols = linear_sum_assignment(weights, maximize=True)
    pairs = sorted(((int(g), int(p), float(s[g, p])) for g, p in zip(rows, cols) if eligible[g, p]),
                   key=lambda t: t[1])
    return Alignment(tuple(pairs), n_gold, n_pred, tau)


# --------------------------------------------------------------------------- chain F1


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


# --------------------------------------------------------------------------- graph F1


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


# --------------------------------------------------------------------------- Kendall's tau


def kendall_tau(gold_indices: Sequence[float], pred_indices: Sequence[float]) -> tuple[float | None, str | None]:
    """Kendall's τ-b between paired gold and predicted positions; ``(None, reason)`` when undefined."""
    from scipy.stats import kendalltau

    x, y = list(gold_indices), list(pred_indices)
    if len(x) != len(y):
        raise ValueError("gold_indices and pred_indices differ in length")
    if len(x) < 2:
        return None, "fewer_than_2_aligned_steps"
    if len(set(x)) < 2 or len(set(y)) < 2:
        return None, "constant_ranks"
    tau = kendalltau(x, y).statistic
    if tau is None or not math.isfinite(float(tau)):
        return None, "undefined"
    return float(tau), None


def kendall_tau_from_alignment(alignment: Alignment) -> tuple[float | None, str | None]:
    return kendall_tau([g for g, _, _ in alignment.pairs], [p for _, p, _ in alignment.pairs])


# --------------------------------------------------------------------------- lexical


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


# --------------------------------------------------------------------------- BERTScore


_SCORERS: dict[tuple[str, int], Any] = {}


def get_bert_scorer(model_path: str, num_layers: int, batch_size: int = 64):
    """A cached ``bert_score.BERTScorer`` on a local model directory (no idf, no rescaling)."""
    key = (str(model_path), int(num_layers))
    if key not in _SCORERS:
        from metamorph.embeddings import _force_offline

        _force_offline()
        from bert_score import BERTScorer

        _SCORERS[key] = BERTScorer(model_type=str(model_path), num_layers=int(num_layers), batch_size=batch_size,
                                   idf=False, rescale_with_baseline=False, device="cpu")
    return _SCORERS[key]


def _truncated_pairs(gold: Sequence[str], pred: Sequence[str]) -> list[tuple[str, str]]:
    n = min(len(gold), len(pred))
    return [(gold[i], pred[i]) for i in range(n)]


def bertscore_f1(gold_steps: Sequence[str], pred_steps: Sequence[str], scorer) -> tuple[float | None, str | None]:
    """Mean BERTScore F1 over the order-preserving pairs ``(gold[i], pred[i])``, ``i < min(|gold|, |pred|)``."""
    if not gold_steps:
        return None, "empty_gold"
    if not pred_steps:
        return 0.0, "empty_candidate"
    pairs = _truncated_pairs(gold_steps, pred_steps)
    _, _, f = scorer.score([p for _, p in pairs], [g for g, _ in pairs])
    return min(float(f.mean().item()), 1.0), None  # float32 rounding can exceed 1 by ~1e-7


def _scorer_record(encoder: Any, scorer_spec: tuple[str, int] | None) -> dict[str, Any]:
    info = getattr(encoder, "info", None)
    if scorer_spec is None:
        return {"bertscore_model": None, "bertscore_model_path": None, "bertscore_num_layers": None,
                "bertscore_rescaled": False, "bertscore_idf": False}
    return {"bertscore_model": getattr(info, "name", None) or scorer_spec[0], "bertscore_model_path": scorer_spec[0],
            "bertscore_num_layers": scorer_spec[1], "bertscore_rescaled": False, "bertscore_idf": False}


# --------------------------------------------------------------------------- scoring


def _resolve_scorer_spec(encoder: Any, bertscore: bool | tuple[str, int]) -> tuple[str, int] | None:
    if bertscore is False or bertscore is None:
        return None
    if isinstance(bertscore, tuple):
        return (str(bertscore[0]), int(bertscore[1]))
    info = getattr(encoder, "info", None)
    if info is None:
        raise ValueError("BERTScore needs the encoder's local model path: pass an embeddings.Encoder, "
                         "bertscore=(path, num_layers), or bertscore=False")
    return (info.path, info.num_layers)


def score_workflows(pairs: Iterable[tuple[Any, Any]], encoder: Any, *, cache: Any = None,
                    tau_align: float = TAU_ALIGN, prefilter: bool = True, graph_method: str = "worfbench",
                    lowercase: bool = True, bertscore: bool | tuple[str, int] = True) -> list[dict[str, Any]]:
    """Every non-judge metric for each ``(gold, pred)`` pair (anything :func:`as_workflow` accepts).

    All distinct step texts of the batch are embedded once through ``cache``
    (:class:`metamorph.embeddings.EmbeddingCache`; a private one when None), and all BERTScore
    pairs of the batch go to one scorer call. ``encoder`` needs ``name`` and ``encode``
    (:class:`metamorph.embeddings.Encoder`); ``bertscore`` is True (use the encoder's directory
    and last layer), ``(model_path, num_layers)``, or False (BERTScore = None, reason
    ``"disabled"``). Returns one flat dict per pair (see :func:`score_workflow`).
    """
    from metamorph.embeddings import EmbeddingCache

    if graph_method not in GRAPH_METHODS:
        raise ValueError(f"graph_method must be one of {GRAPH_METHODS}, not {graph_method!r}")
    wfs = [(as_workflow(g), as_workflow(p)) for g, p in pairs]
    cache = cache if cache is not None else EmbeddingCache()
    texts = list(dict.fromkeys(t for g, p in wfs for t in (*g.nodes, *p.nodes)))
    vecs = cache.embed(encoder, texts) if texts else np.zeros((0, 0), dtype=np.float32)
    row = {t: i for i, t in enumerate(texts)}

    scorer_spec = _resolve_scorer_spec(encoder, bertscore)
    bs_pairs: list[tuple[str, str]] = []
    bs_slices: list[tuple[int, int]] = []
    for g, p in wfs:
        start = len(bs_pairs)
        if scorer_spec is not None and g.nodes and p.nodes:
            bs_pairs.extend(_truncated_pairs(g.nodes, p.nodes))
        bs_slices.append((start, len(bs_pairs)))
    bs_f = None
    if bs_pairs:
        scorer = get_bert_scorer(*scorer_spec)
        _, _, f = scorer.score([p for _, p in bs_pairs], [g for g, _ in bs_pairs])
        # float32 cosine arithmetic can put an identical pair a hair above 1 (1.00000004): clip to 1
        bs_f = np.minimum(f.detach().cpu().numpy().astype(np.float64), 1.0)

    provenance = {
        **(encoder.info.as_record() if hasattr(encoder, "info") else
           {"encoder": encoder.name, "encoder_path": None, "encoder_source": None, "encoder_num_layers": None,
            "encoder_fallback_reason": None}),
        "tau_align": tau_align, "align_prefilter": prefilter, "graph_method": graph_method,
        "lexical_lowercase": lowercase, "lexical_tokenizer": "nltk.NLTKWordTokenizer",
        **_scorer_record(encoder, scorer_spec),
    }
    results = []
    for (g, p), (a, b) in zip(wfs, bs_slices):
        if g.nodes and p.nodes:
            sim = similarity_matrix(vecs[[row[t] for t in g.nodes]], vecs[[row[t] for t in p.nodes]])
        else:
            sim = np.zeros((len(g.nodes), len(p.nodes)))
        al = align(sim, tau_align, prefilter=prefilter)
        ch = chain_f1_from_alignment(al)
        gr = graph_f1_from_alignment(g.edges, p.edges, al, graph_method)
        tau, tau_reason = kendall_tau_from_alignment(al)
        if not g.nodes:
            tau_reason = "empty_gold"
        bl, bl_reason = bleu(g.nodes, p.nodes, lowercase)
        gl, gl_reason = gleu(g.nodes, p.nodes, lowercase)
        if not g.nodes:
            bl = gl = None
            bl_reason = gl_reason = "empty_gold"
        if scorer_spec is None:
            bs, bs_reason = None, "disabled"
        elif not g.nodes:
            bs, bs_reason = None, "empty_gold"
        elif not p.nodes:
            bs, bs_reason = 0.0, "empty_candidate"
        else:
            bs, bs_reason = float(np.mean(bs_f[a:b])), None
        results.append({
            "n_gold_steps": len(g.nodes), "n_pred_steps": len(p.nodes), "n_aligned": len(al),
            "chain_precision": ch["precision"], "chain_recall": ch["recall"], "chain_f1": ch["f1"],
            "chain_lis": ch["lis"], "chain_reason": ch["reason"],
            "graph_precision": gr["precision"], "graph_recall": gr["recall"], "graph_f1": gr["f1"],
            "graph_common_nodes": gr["common_nodes"], "graph_common_edges": gr["common_edges"],
            "graph_reason": gr["reason"], "pred_invalid_edges": gr["pred_invalid_edges"],
            "bleu": bl, "bleu_reason": bl_reason, "gleu": gl, "gleu_reason": gl_reason,
            "bertscore_f1": bs, "bertscore_reason": bs_reason, "bertscore_pairs": b - a,
            "kendall_tau": tau, "kendall_tau_reason": tau_reason,
            "aligned_pairs": [[gi, pj, round(s, 6)] for gi, pj, s in al.pairs],
            **provenance,
        })
    return results


def score_workflow(gold: Any, pred: Any, encoder: Any, **kwargs: Any) -> dict[str, Any]:
    """Every non-judge metric of one candidate against one gold workflow, as one flat dict.

    Keys: ``n_gold_steps``, ``n_pred_steps``, ``n_aligned``; ``chain_{precision,recall,f1,lis,reason}``;
    ``graph_{precision,recall,f1,common_nodes,common_edges,reason}``, ``pred_invalid_edges``;
    ``bleu``/``gleu`` (+ ``_reason``); ``bertscore_f1`` (+ ``_reason``, ``bertscore_pairs``);
    ``kendall_tau`` (+ ``_reason``); ``aligned_pairs`` ``[[gold_i, pred_j, sim], ...]``; and the
    provenance ``encoder``, ``encoder_path``, ``encoder_source``, ``encoder_num_layers``,
    ``encoder_fallback_reason``, ``tau_align``, ``align_prefilter``, ``graph_method``,
    ``lexical_lowercase``, ``lexical_tokenizer``, ``bertscore_model``, ``bertscore_model_path``,
    ``bertscore_num_layers``, ``bertscore_rescaled`` (always False), ``bertscore_idf``.
    A ``*_reason`` is None when the value is defined normally. Keyword arguments as
    :func:`score_workflows`.
    """
    return score_workflows([(gold, pred)], encoder, **kwargs)[0]


# --------------------------------------------------------------------------- LLM-as-Judge


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
