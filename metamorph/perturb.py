"""WorkflowPerturb perturbations (Kanda et al., arXiv:2602.17990 §3.1 and App. A; issue #4).

Three perturbation types, each at the severities p ∈ :data:`SEVERITIES` = {0.1, 0.3, 0.5}:

* ``missing`` (Missing Steps): N steps are removed; each removed step's predecessors are linked to
  its successors.
* ``compressed`` (Compressed Steps): N steps are merged into a neighbouring step, so the workflow
  has N fewer nodes and the merged node describes both steps.
* ``description`` (Description Changes): N step descriptions are reworded; the graph is unchanged.

**N, the number of steps to alter** (:func:`n_to_alter`): ``N = max(1, floor(p·n + 1/2))`` —
round half up, not Python's banker's ``round`` (``p·n`` is first rounded to 9 decimals so 0.3·15
is 4.5, not 4.4999…) — capped at ``n − 1`` so at least one step stays untouched. With n = 5:
N = 1, 2, 3 at p = 0.1, 0.3, 0.5.

**Target score** (§3.1, :func:`target_score`): ``1 − p`` for missing and compressed, ``1.0`` for
description changes (the workflow still means the same thing).

Two generators fill the same :class:`Perturbation` record:

1. Deterministic operators (no LLM, seeded): :func:`remove_steps`, :func:`compress_steps`,
   :func:`paraphrase_steps` (and :func:`perturb_deterministic` picking N and the seed per row).
2. The LLM generator on the plan of App. A (:func:`generate_perturbation`): one fixed worked example
   per type, written for this project, before a row-specific instruction naming the golden
   workflow and the exact N; the reply is parsed from the ``Node:``/``Edge:`` format and checked
   statically (:func:`check_variant`: node count, change count); an invalid reply is answered with
   the validation error as a new user turn (the refinement loop of A.6) up to ``max_attempts``
   times per model; then the next, stronger model of the configured list is tried (escalation); for
   description changes the per-node hybrid fallback of A.10 finally asks for one step at a time and
   splices the results into the golden graph. A row that still fails is returned with
   ``status="invalid"`` and the residual failure — never dropped.

Model calls are plain callables ``messages -> GenerationResult`` (:class:`GeneratorModel`), so the
study can route them through :func:`metamorph.runner.run_requests` and the generation cache; use
:func:`build_request` / :func:`provider_generate` so every call is a cacheable
:class:`~metamorph.providers.base.GenerationRequest`.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from metamorph.errors import InputError
from metamorph.providers.base import GenerationRequest, GenerationResult, Provider, ProviderError
from metamorph.workflows import (
    END,
    START,
    Edge,
    Workflow,
    edge_sort_key,
    format_workflow,
    graph_problem,
    parse_workflow_text,
)

#: Perturbation types (§3.1) in the paper's order, with the paper's names.
PERTURBATION_TYPES = ("missing", "compressed", "description")
TYPE_NAMES = {"missing": "Missing Steps", "compressed": "Compressed Steps", "description": "Description Changes"}
#: Severity levels p (§3.1): the fraction of steps altered.
SEVERITIES = (0.1, 0.3, 0.5)
#: Version of the prompts below; part of every request (``renderer_version``), so the generation
#: cache never serves a reply to an older prompt.
PROMPT_VERSION = "workflowperturb-prompts-v1"
#: Decoding parameters of the generator's requests (greedy; the seed is sent explicitly).
DEFAULT_PARAMS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 1024, "seed": 0}


def _check_type(ptype: str) -> None:
    if ptype not in PERTURBATION_TYPES:
        raise ValueError(f"unknown perturbation type {ptype!r}; known: {list(PERTURBATION_TYPES)}")


def n_to_alter(p: float, n_nodes: int) -> int:
    """Number of steps N to alter at severity ``p`` in a workflow of ``n_nodes`` steps.

    ``N = min(n_nodes − 1, max(1, floor(p·n_nodes + 1/2)))`` (round half up; ``p·n`` rounded to 9
    decimals first). Table: n=5 → 1, 2, 3; n=7 → 1, 2, 4; n=8 → 1, 2, 4; n=16 → 2, 5, 8 for
    p = 0.1, 0.3, 0.5. Raises ``ValueError`` unless ``0 < p < 1`` and ``n_nodes >= 2``.
    """
    if not 0 < p < 1:
        raise ValueError(f"severity p must be in (0, 1), got {p}")
    if n_nodes < 2:
        raise ValueError(f"a workflow needs at least 2 steps to be perturbed, got {n_nodes}")
    return min(n_nodes - 1, max(1, math.floor(round(p * n_nodes, 9) + 0.5)))


def target_score(ptype: str, p: float) -> float:
    """The §3.1 target: ``1 − p`` for missing/compressed, ``1.0`` for description changes."""
    _check_type(ptype)
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
        status: ``valid`` or ``invalid`` (static validation, :func:`check_variant`).
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
            "variant_id": self.variant_id, "golden_id": self.golden_id, "type": self.type, "p": self.p,
            "n_altered": self.n_altered, "altered_node_ids": json.dumps(list(self.altered_node_ids)),
            "target_score": self.target_score, "operator": self.operator, "method": self.method,
            "model": self.model, "models_tried": json.dumps(list(self.models_tried)), "attempts": self.attempts,
            "status": self.status, "failure": self.failure,
            "n_nodes": None if w is None else w.n_nodes,
            "nodes_json": None if w is None else json.dumps(list(w.nodes), ensure_ascii=False),
            "edges_json": None if w is None else json.dumps([list(e) for e in w.edges]),
            "workflow_text": None if w is None else format_workflow(w),
            "raw_output": self.raw_output,
        }


# ------------------------------------------------------------------------------------------
# Graph editing helpers (node keys are golden ids until the final renumbering)


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


def _renumber(order: Sequence[str], texts: dict[str, str], edges: set[Edge]) -> tuple[tuple[str, ...], tuple[Edge, ...]]:
    """Nodes kept in ``order`` become 1..m; edges are remapped, deduplicated and sorted
    (:func:`~metamorph.workflows.edge_sort_key`: START first, ids numerically, END last)."""
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


def _variant(w: Workflow, ptype: str, p: float | None, n: int, nodes: tuple[str, ...],
             edges: tuple[Edge, ...]) -> Workflow:
    return Workflow(variant_id(w.workflow_id, ptype, p, n), w.task, nodes, edges, w.source)


def _check_n(w: Workflow, n: int) -> None:
    if not 1 <= n <= w.n_nodes - 1:
        raise ValueError(f"workflow {w.workflow_id!r} has {w.n_nodes} steps; N must be in 1..{w.n_nodes - 1}, got {n}")


# ------------------------------------------------------------------------------------------
# Deterministic operators


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


def remove_steps(w: Workflow, n: int, rng: random.Random, *, p: float | None = None) -> Perturbation:
    """Missing Steps (§3.1): remove ``n`` steps chosen uniformly with ``rng`` (``rng.sample`` of
    the ids) and reconnect predecessors to successors (:func:`remove_nodes`).

    Raises ``ValueError`` unless ``1 <= n <= w.n_nodes - 1``.
    """
    _check_n(w, n)
    ids = tuple(sorted(rng.sample(list(w.node_ids), n), key=int))
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


def compress_steps(w: Workflow, n: int, rng: random.Random, *, p: float | None = None) -> Perturbation:
    """Compressed Steps (§3.1): ``n`` times, merge one step into a neighbour (edge contraction).

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
    inside merged nodes. Raises ``ValueError`` unless ``1 <= n <= w.n_nodes - 1``.
    """
    _check_n(w, n)
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


#: Leading imperative verbs and their replacements (lower case; the original capitalisation is kept).
VERB_SYNONYMS: dict[str, str] = {
    "go": "head", "take": "grab", "put": "place", "place": "set", "open": "pull open", "close": "shut",
    "click": "press", "tap": "press", "select": "choose", "choose": "pick", "find": "locate",
    "locate": "find", "check": "verify", "verify": "confirm", "confirm": "verify",
    "make": "create", "create": "make", "get": "obtain", "buy": "purchase", "use": "utilize", "add": "include",
    "remove": "take out", "clean": "wash", "heat": "warm", "cool": "chill", "turn": "switch", "start": "begin",
    "begin": "start", "run": "execute", "execute": "run", "write": "draft", "draft": "write",
    "calculate": "compute", "compute": "calculate", "determine": "figure out", "decide": "determine",
    "identify": "pinpoint", "cut": "slice", "chop": "dice", "mix": "combine", "retrieve": "fetch",
    "fetch": "retrieve", "contact": "reach out to", "collect": "gather", "gather": "collect",
    "build": "construct", "book": "reserve", "review": "go over", "cook": "prepare",
    "give": "hand", "consider": "think about", "avoid": "steer clear of", "ensure": "make sure",
    "stay": "remain", "try": "attempt", "navigate": "go", "type": "enter", "install": "set up",
    "submit": "send in", "practice": "rehearse",
}
_LEADING_CLAUSE = re.compile(r"^(If|When|Once|After|Before|While|In|For|During|With|Using|To)\b([^,]+),\s*(.+?)([.!?]?)$",
                             re.IGNORECASE | re.DOTALL)


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _low(s: str) -> str:
    """Lower-case the first letter unless the first word looks like an acronym or a name (``VLC``)."""
    word = s.split(" ", 1)[0]
    return s[:1].lower() + s[1:] if len(word) > 1 and word[1:].islower() or len(word) == 1 else s


def paraphrase_text(text: str) -> str:
    """Deterministic rule-based rewording of one step (the Description Changes operator's core).

    The first rule that applies:

    1. synonym: a leading imperative verb in :data:`VERB_SYNONYMS` followed by a space is
       replaced (``take pillow 1 from sofa 1`` → ``grab pillow 1 from sofa 1``; ``Click File`` →
       ``Press File``);
    2. leading clause moved to the end: ``If/When/Once/After/Before/While/In/For/During/With/Using/To
       X, Y`` → ``Y x`` (``In Jewish Law, precedence is given`` → ``Precedence is given in Jewish Law``);
    3. otherwise ``Next, `` is prefixed (first letter lower-cased unless the first word looks
       like a name or an acronym: ``Next, cook the spaghetti``, ``Next, VLC opens``).

    The result always differs from ``text`` after :func:`normalize_text` (case, spacing and final
    punctuation ignored); rule 3 is used when an earlier one would not change it. Action syntax such
    as ``search[...]`` or ``click[...]`` is never split (rule 1 needs a space after the verb).
    """
    s = text.strip()
    m = re.match(r"^([A-Za-z]+)(\s.*)$", s, re.DOTALL)
    candidates = []
    if m and m.group(1).lower() in VERB_SYNONYMS:
        new = VERB_SYNONYMS[m.group(1).lower()]
        candidates.append((_cap(new) if m.group(1)[0].isupper() else new) + m.group(2))
    m = _LEADING_CLAUSE.match(s)
    if m and m.group(2).strip() and m.group(3).strip():
        candidates.append(f"{_cap(m.group(3).strip())} {_low(m.group(1) + m.group(2)).strip()}{m.group(4)}")
    candidates.append(f"Next, {_low(s)}")
    return next(c for c in candidates if normalize_text(c) != normalize_text(s))


def paraphrase_steps(w: Workflow, n: int, rng: random.Random, *, p: float | None = None) -> Perturbation:
    """Description Changes (§3.1): reword ``n`` steps (chosen with ``rng.sample``) with
    :func:`paraphrase_text`; the graph and every other step are unchanged.

    Raises ``ValueError`` unless ``1 <= n <= w.n_nodes - 1``.
    """
    _check_n(w, n)
    ids = tuple(sorted(rng.sample(list(w.node_ids), n), key=int))
    nodes = tuple(paraphrase_text(t) if k in ids else t for k, t in zip(w.node_ids, w.nodes))
    return _deterministic(w, "description", p, n, ids, "paraphrase_steps", nodes, w.edges)


_OPERATORS = {"missing": remove_steps, "compressed": compress_steps, "description": paraphrase_steps}


def _deterministic(w: Workflow, ptype: str, p: float | None, n: int, altered: tuple[str, ...], method: str,
                   nodes: tuple[str, ...], edges: tuple[Edge, ...]) -> Perturbation:
    """Wrap an operator's output, running the same static validation as for LLM replies."""
    problem = check_variant(w, ptype, n, nodes, edges)
    return Perturbation(workflow=_variant(w, ptype, p, n, nodes, edges), type=ptype, p=p, n_altered=n,
                        altered_node_ids=altered, operator="deterministic", golden_id=w.workflow_id,
                        method=method, status="valid" if problem is None else "invalid", failure=problem)


def perturb_deterministic(w: Workflow, ptype: str, p: float, seed: int = 0) -> Perturbation:
    """Apply the deterministic operator of ``ptype`` at severity ``p``: N = :func:`n_to_alter`,
    rng = ``random.Random(row_seed(w.workflow_id, ptype, p, seed))`` — the same row always gives
    the same variant, independent of which other rows are generated."""
    _check_type(ptype)
    rng = random.Random(row_seed(w.workflow_id, ptype, p, seed))
    return _OPERATORS[ptype](w, n_to_alter(p, w.n_nodes), rng, p=p)


# ------------------------------------------------------------------------------------------
# Static validation (shared by both generators)

_STOP = frozenset({
    "a", "an", "the", "to", "of", "and", "or", "in", "on", "at", "for", "with", "from", "into", "onto", "by", "it",
    "its", "your", "you", "then", "also", "is", "are", "be", "this", "that", "these", "those", "as", "if",
})


def normalize_text(t: str) -> str:
    """Comparison form of a step: lower case, whitespace collapsed, final ``. ; : !`` dropped."""
    return re.sub(r"\s+", " ", str(t)).strip().rstrip(".;:!").strip().lower()


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
    _check_type(ptype)
    return n_nodes if ptype == "description" else n_nodes - n


def check_variant(golden: Workflow, ptype: str, n: int, nodes: Sequence[str], edges: Sequence[Edge]) -> str | None:
    """Static validation of a variant (App. A): the first problem as a sentence, or ``None``.

    In order: the graph (:func:`~metamorph.workflows.graph_problem` with no minimum size); the node
    count (:func:`expected_nodes`); the change count:

    * missing: every node is a golden step, unchanged (:func:`normalize_text` equality, each
      golden step used once);
    * compressed: every node is a golden step unchanged or a merge; every golden step not kept is
      covered by a merged node and every merged node covers at least two golden steps (coverage:
      the step's text or half its content words appear in the merged text);
    * description: the edges equal the golden edges and exactly N step texts differ from the
      golden ones at the same id.
    """
    _check_type(ptype)
    problem = graph_problem(list(nodes), list(edges), min_nodes=1)
    if problem is not None:
        return f"invalid graph: {problem[1]}"
    want = expected_nodes(ptype, golden.n_nodes, n)
    if len(nodes) != want:
        how = ("unchanged" if ptype == "description"
               else f"{golden.n_nodes} golden steps minus {n} {'removed' if ptype == 'missing' else 'merged'}")
        return f"expected {want} nodes ({how}), got {len(nodes)}"
    if ptype == "description":
        if set(edges) != set(golden.edges):
            return "the edges differ from the golden workflow's; description changes must keep every edge"
        changed = [str(i) for i, (a, b) in enumerate(zip(golden.nodes, nodes), start=1)
                   if normalize_text(a) != normalize_text(b)]
        if len(changed) != n:
            return (f"expected exactly {n} changed step description{'s' if n != 1 else ''}, found {len(changed)}"
                    + (f" (changed: {', '.join(changed)})" if changed else ""))
        return None
    matched, free = _match_kept(golden, nodes)
    others = [i for i in range(len(nodes)) if i not in matched]
    if ptype == "missing":
        if others:
            i = others[0]
            return (f"node {i + 1} ({nodes[i]!r}) is not one of the golden steps; the remaining steps must keep "
                    "their text unchanged")
        return None
    for i in others:
        covered = [g for g in free if _covers(nodes[i], golden.text(g))]
        if len(covered) < 2:
            return f"node {i + 1} ({nodes[i]!r}) is neither a golden step nor a merge of two golden steps"
    for g in free:
        if not any(_covers(nodes[i], golden.text(g)) for i in others):
            return f"golden step {g} ({golden.text(g)!r}) is neither kept nor part of a merged step"
    return None


def _altered_from_output(golden: Workflow, ptype: str, nodes: Sequence[str]) -> tuple[str, ...]:
    if ptype == "description":
        return tuple(str(i) for i, (a, b) in enumerate(zip(golden.nodes, nodes), start=1)
                     if normalize_text(a) != normalize_text(b))
    return tuple(_match_kept(golden, nodes)[1])


def check_output(golden: Workflow, ptype: str, n: int, text: str) -> tuple[tuple[tuple[str, ...], tuple[Edge, ...]] | None, str | None]:
    """Parse a model reply and :func:`check_variant` it: ``((nodes, edges) or None, problem or None)``.
    A parse failure is the problem ``could not read the workflow: <reason>``."""
    try:
        nodes, edges = parse_workflow_text(text, source="reply")
    except InputError as exc:
        return None, f"could not read the workflow: {exc.problem}"
    return (nodes, edges), check_variant(golden, ptype, n, nodes, edges)


# ------------------------------------------------------------------------------------------
# Prompts (written for this project on the plan of App. A)

SYSTEM_PROMPT = (
    "You edit workflows for a benchmark that tests workflow-evaluation metrics. A workflow is written as\n"
    "Node:\n1: <step>\n2: <step>\n...\nEdge: (START,1) (1,2) ... (n,END)\n"
    "An edge (u,v) means step u must be done before step v; START and END are the start and the end. "
    "Always answer with one complete workflow in exactly this format and nothing else."
)

#: The fixed worked example (A.2): one golden workflow and one perturbed version per type, N = 2.
EXAMPLE_GOLDEN = Workflow(
    "example/make_tea", "Make a cup of tea.",
    ("Fill the kettle with water", "Boil the water", "Put a tea bag in a mug",
     "Pour the boiling water into the mug", "Let the tea steep for three minutes",
     "Remove the tea bag and serve the tea"),
    (("START", "1"), ("START", "3"), ("1", "2"), ("2", "4"), ("3", "4"), ("4", "5"), ("5", "6"), ("6", "END")),
    "embedded",
)
EXAMPLE_N = 2
EXAMPLE_OUTPUTS: dict[str, str] = {
    "missing": (  # steps 2 and 5 removed; 1 -> 4 and 4 -> 6 reconnect the graph
        "Node:\n1: Fill the kettle with water\n2: Put a tea bag in a mug\n3: Pour the boiling water into the mug\n"
        "4: Remove the tea bag and serve the tea\nEdge: (START,1) (START,2) (1,3) (2,3) (3,4) (4,END)"),
    "compressed": (  # step 2 merged into 1, step 6 merged into 5
        "Node:\n1: Fill the kettle with water and boil it\n2: Put a tea bag in a mug\n"
        "3: Pour the boiling water into the mug\n"
        "4: Let the tea steep for three minutes, then remove the tea bag and serve the tea\n"
        "Edge: (START,1) (START,2) (1,3) (2,3) (3,4) (4,END)"),
    "description": (  # steps 3 and 5 reworded
        "Node:\n1: Fill the kettle with water\n2: Boil the water\n3: Drop a tea bag into a mug\n"
        "4: Pour the boiling water into the mug\n5: Leave the tea to brew for three minutes\n"
        "6: Remove the tea bag and serve the tea\n"
        "Edge: (START,1) (START,3) (1,2) (2,4) (3,4) (4,5) (5,6) (6,END)"),
}


def _plural(k: int, word: str) -> str:
    return f"{k} {word}{'s' if k != 1 else ''}"


def row_instruction(golden: Workflow, ptype: str, n: int) -> str:
    """The row-specific instruction: the task, the golden workflow in Node:/Edge: form, the exact N
    and the node count the answer must have."""
    _check_type(ptype)
    total = golden.n_nodes
    want = expected_nodes(ptype, total, n)
    head = f"Task: {golden.task}\nGolden workflow ({_plural(total, 'step')}):\n{format_workflow(golden)}\n\n"
    if ptype == "missing":
        body = (f"Remove exactly {_plural(n, 'step')} from this workflow. Copy every other step's text unchanged, "
                f"renumber the remaining steps 1 to {want}, and reconnect the edges so that each removed step's "
                f"predecessors lead to its successors. The answer must have exactly {_plural(want, 'step')}.")
    elif ptype == "compressed":
        body = (f"Compress this workflow by merging exactly {_plural(n, 'step')} into a neighbouring step: each "
                f"merged node describes both steps in one sentence. Copy the other steps unchanged, renumber the "
                f"steps 1 to {want}, and keep the order of the edges. The answer must have exactly "
                f"{_plural(want, 'step')}.")
    else:
        body = (f"Reword exactly {_plural(n, 'step')} of this workflow: say the same thing with different words. "
                f"Copy all other steps unchanged, keep all {total} steps with their numbers and keep every edge "
                f"exactly as it is.")
    return head + body + "\nAnswer with the workflow only, in the Node:/Edge: format."


def build_messages(golden: Workflow, ptype: str, n: int) -> list[dict[str, str]]:
    """System prompt, the fixed worked example of ``ptype`` (user instruction + assistant answer,
    A.2), then the row instruction (:func:`row_instruction`)."""
    _check_type(ptype)
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": row_instruction(EXAMPLE_GOLDEN, ptype, EXAMPLE_N)},
        {"role": "assistant", "content": EXAMPLE_OUTPUTS[ptype]},
        {"role": "user", "content": row_instruction(golden, ptype, n)},
    ]


def feedback_message(problem: str) -> str:
    """The refinement turn (A.6): the exact validation error, and the request to answer again."""
    return (f"Your workflow is not valid: {problem}\n"
            "Fix this and answer again with the complete workflow in the Node:/Edge: format, and nothing else.")


NODE_SYSTEM_PROMPT = ("You reword single steps of workflows. Keep the meaning, change the wording. "
                      "Answer with the reworded step only, on one line.")
NODE_EXAMPLE = ("Put a tea bag in a mug", "Drop a tea bag into a mug")


def node_instruction(golden: Workflow, node_id: str) -> str:
    """The per-node instruction of the hybrid fallback (A.10): task context and one step."""
    return f"Task: {golden.task}\nStep: {golden.text(node_id)}\nReword this step."


def build_node_messages(golden: Workflow, node_id: str) -> list[dict[str, str]]:
    """Messages asking for one reworded step (system, fixed example pair, the step)."""
    return [
        {"role": "system", "content": NODE_SYSTEM_PROMPT},
        {"role": "user", "content": f"Task: {EXAMPLE_GOLDEN.task}\nStep: {NODE_EXAMPLE[0]}\nReword this step."},
        {"role": "assistant", "content": NODE_EXAMPLE[1]},
        {"role": "user", "content": node_instruction(golden, node_id)},
    ]


_NODE_PREFIX = re.compile(r"^(?:[-*>\s]*)(?:(?:reworded|rewritten|new)?\s*step\s*\d*\s*[:.-]\s*|\d+\s*[:.)]\s*)",
                          re.IGNORECASE)


def check_node_reply(original: str, reply: str | None) -> tuple[str | None, str | None]:
    """Read one reworded step: first non-empty line, a leading ``Step:``/``1:`` label and quotes
    removed. Returns ``(text, None)`` or ``(None, problem)``: empty reply, a workflow instead of a
    step, longer than 3×original + 40 characters, or unchanged after :func:`normalize_text`."""
    lines = [x.strip() for x in (reply or "").replace("\r", "\n").split("\n") if x.strip()]
    if not lines:
        return None, "the reply is empty; answer with the reworded step"
    text = _NODE_PREFIX.sub("", lines[0]).strip().strip('"\'`').strip()
    if not text:
        return None, "the reply is empty; answer with the reworded step"
    if re.match(r"^(node|edge)s?\s*:", text, re.IGNORECASE):
        return None, "the reply is a workflow; answer with the reworded step only"
    if len(text) > 3 * len(original) + 40:
        return None, f"the reworded step is too long ({len(text)} characters for a {len(original)}-character step)"
    if normalize_text(text) == normalize_text(original):
        return None, "the reworded step is identical to the original; use different words"
    return text, None


# ------------------------------------------------------------------------------------------
# LLM generator


GenerateFn = Callable[[list[dict[str, str]]], GenerationResult]


@dataclass(frozen=True)
class GeneratorModel:
    """One model of the escalation list: a name for the record and ``generate(messages) -> result``."""

    name: str
    generate: GenerateFn


def build_request(provider: str, model: str, messages: Sequence[dict[str, str]], *,
                  params: dict[str, Any] | None = None, base_url: str | None = None) -> GenerationRequest:
    """The cacheable request of one generator call: :data:`DEFAULT_PARAMS` updated with ``params``
    (a ``None`` value removes a parameter), ``renderer_version`` = :data:`PROMPT_VERSION`."""
    merged = {k: v for k, v in {**DEFAULT_PARAMS, **(params or {})}.items() if v is not None}
    return GenerationRequest(provider=provider, model=model, messages=tuple(dict(m) for m in messages),
                             params=merged, base_url=base_url, renderer_version=PROMPT_VERSION)


def provider_generate(provider: Provider, model: str, *, cache: Any = None, params: dict[str, Any] | None = None,
                      base_url: str | None = None, retry: Any = None,
                      log: Callable[[str], None] | None = None) -> GenerateFn:
    """A ``generate`` callable for :class:`GeneratorModel` backed by a provider.

    Each call builds :func:`build_request`; with a :class:`~metamorph.cache.GenerationCache` it goes
    through :func:`~metamorph.runner.run_requests` (cache hit, or a call with retries stored at
    once), otherwise straight to the provider with :func:`~metamorph.providers.retry.call_with_retries`.
    Failures come back as results with ``error`` set, never as exceptions.
    """
    from metamorph.providers.retry import RetryPolicy, call_with_retries
    from metamorph.runner import run_requests

    quiet = log or (lambda _msg: None)

    def generate(messages: list[dict[str, str]]) -> GenerationResult:
        req = build_request(provider.kind, model, messages, params=params, base_url=base_url)
        if cache is not None:
            outcomes, _ = run_requests([req], provider, cache, retry=retry, log=quiet)
            return outcomes[0].result
        try:
            res, attempts = call_with_retries(lambda: provider.generate(req), retry or RetryPolicy())
            return res.replace(attempts=attempts)
        except ProviderError as exc:
            return GenerationResult(text=None, error=f"ProviderError[{exc.status}]: {exc}")
        except Exception as exc:  # recorded on the row, never raised out of the study
            return GenerationResult(text=None, error=f"{type(exc).__name__}: {exc}")

    return generate


def _as_models(models: Sequence[GeneratorModel | tuple[str, GenerateFn]]) -> list[GeneratorModel]:
    out = [m if isinstance(m, GeneratorModel) else GeneratorModel(*m) for m in models]
    if not out:
        raise ValueError("the LLM generator needs at least one model")
    return out


def _reply_problem(res: GenerationResult) -> str | None:
    if res.error is not None or res.text is None:
        return f"the model call failed: {res.error}"
    return None


def _cut_note(res: GenerationResult) -> str:
    return " (the reply was cut off at the token limit)" if res.finish_reason == "length" else ""


@dataclass
class _Tally:
    attempts: int = 0
    tried: list[str] = field(default_factory=list)
    model: str | None = None

    def call(self, m: GeneratorModel, messages: list[dict[str, str]]) -> GenerationResult:
        self.attempts += 1
        self.model = m.name
        if m.name not in self.tried:
            self.tried.append(m.name)
        return m.generate([dict(x) for x in messages])


def generate_perturbation(golden: Workflow, ptype: str, p: float,
                          models: Sequence[GeneratorModel | tuple[str, GenerateFn]], *,
                          max_attempts: int = 3, hybrid: bool = True, seed: int = 0,
                          n: int | None = None) -> Perturbation:
    """The LLM generator of App. A for one (golden, type, severity) row.

    1. Messages = :func:`build_messages` (worked example of the type + the row instruction with
       N = :func:`n_to_alter` unless ``n`` is given).
    2. For each model in ``models`` (escalation order, weakest first), up to ``max_attempts``
       calls: the reply is checked with :func:`check_output`; if it fails, the reply and
       :func:`feedback_message` of the exact problem are appended as new assistant/user turns
       (A.6) and the model is asked again. A failed call (``result.error``) uses an attempt and is
       retried with the same messages. Each model starts again from the base messages.
    3. Description changes only, when every model failed and ``hybrid``: the per-node fallback
       (A.10). N node ids are drawn with ``random.Random(row_seed(...))``; each is reworded alone
       (:func:`build_node_messages`, :func:`check_node_reply`, same refinement and escalation), and
       the reworded steps are spliced into the golden graph.

    Returns a :class:`Perturbation` with ``operator="llm"``, ``method`` ``llm`` or ``llm_hybrid``,
    ``attempts`` (all calls), ``model`` (the last one called), ``models_tried``, ``status``
    ``valid``/``invalid`` and ``failure`` (the last problem) — an invalid row keeps the last
    parsed variant (or ``workflow=None``) and the raw reply. Raises ``ValueError`` for an unknown
    type, an empty model list or ``max_attempts < 1``.
    """
    _check_type(ptype)
    ms = _as_models(models)
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    n = n_to_alter(p, golden.n_nodes) if n is None else n
    _check_n(golden, n)
    tally = _Tally()
    base = build_messages(golden, ptype, n)
    failure: str | None = None
    raw: str | None = None
    last: tuple[tuple[str, ...], tuple[Edge, ...]] | None = None

    def record(status: str, method: str, graph: tuple[tuple[str, ...], tuple[Edge, ...]] | None,
               problem: str | None) -> Perturbation:
        wf = None if graph is None else _variant(golden, ptype, p, n, *graph)
        altered = () if graph is None else _altered_from_output(golden, ptype, graph[0])
        return Perturbation(workflow=wf, type=ptype, p=p, n_altered=n, altered_node_ids=altered, operator="llm",
                            golden_id=golden.workflow_id, method=method, model=tally.model,
                            models_tried=tuple(tally.tried), attempts=tally.attempts, status=status,
                            failure=problem, raw_output=raw)

    for m in ms:
        messages = list(base)
        for _ in range(max_attempts):
            res = tally.call(m, messages)
            failure = _reply_problem(res)
            if failure is not None:
                continue
            raw = res.text
            graph, problem = check_output(golden, ptype, n, res.text or "")
            if graph is not None:
                last = graph
            if problem is None:
                return record("valid", "llm", graph, None)
            failure = problem + _cut_note(res)
            messages = messages + [{"role": "assistant", "content": res.text or ""},
                                   {"role": "user", "content": feedback_message(failure)}]
    if ptype == "description" and hybrid:
        return _hybrid(golden, p, n, ms, max_attempts, seed, tally, record, failure, last)
    return record("invalid", "llm", last, failure)


def _hybrid(golden: Workflow, p: float, n: int, ms: list[GeneratorModel], max_attempts: int, seed: int,
            tally: _Tally, record: Callable[..., Perturbation], whole_failure: str | None,
            last: tuple[tuple[str, ...], tuple[Edge, ...]] | None) -> Perturbation:
    """Per-node fallback (A.10) of description changes; see :func:`generate_perturbation`."""
    rng = random.Random(row_seed(golden.workflow_id, "description", p, seed))
    ids = sorted(rng.sample(list(golden.node_ids), n), key=int)
    texts = list(golden.nodes)
    for nid in ids:
        original = golden.text(nid)
        new, problem = None, None
        for m in ms:
            messages = build_node_messages(golden, nid)
            for _ in range(max_attempts):
                res = tally.call(m, messages)
                problem = _reply_problem(res)
                if problem is not None:
                    continue
                new, problem = check_node_reply(original, res.text)
                if new is not None:
                    break
                messages = messages + [{"role": "assistant", "content": res.text or ""},
                                       {"role": "user", "content": f"That is not usable: {problem}. "
                                                                   "Answer with the reworded step only."}]
            if new is not None:
                break
        if new is None:
            return record("invalid", "llm_hybrid", last,
                          f"whole workflow: {whole_failure}; per-node fallback, step {nid}: {problem}")
        texts[int(nid) - 1] = new
    graph = (tuple(texts), golden.edges)
    problem = check_variant(golden, "description", n, *graph)
    return record("valid" if problem is None else "invalid", "llm_hybrid", graph, problem)
