"""``metamorph gate``: the WorkflowPerturb CI gate on the command line (a command of :mod:`metamorph.cli`).

``metamorph gate --golden G --candidate C [--thresholds T] [--mode primary_and_secondary|any|joint]
[--encoder mpnet|minilm] [--json]``

    The WorkflowPerturb CI/CD regression gate (arXiv 2602.17990 §6, Table 1). Scores
    every (golden, candidate) pair with :func:`metamorph.studies.workflow_perturb.metrics.score_workflows`
    (Chain/Graph F1, BLEU, GLEU, BERTScore, Kendall τ — no LLM judge, which is therefore
    reported as undefined), evaluates each failure mode's metric bundle with
    :mod:`metamorph.studies.workflow_perturb.gate` (breach iff value < threshold; ``primary_and_secondary``/``any``/``joint`` firing) and prints
    per failure mode PASS/FAIL with the values and thresholds (``--json``: one JSON object on
    stdout).

    Exit codes: **0** nothing fires; **1** regression (a bundle fired on some pair, or a golden
    id has no candidate); **2** bad input — a missing or unreadable file, an unparseable
    workflow, an empty step, a workflow over the size bound (:data:`~metamorph.studies.workflow_perturb.gate.MAX_GATE_STEPS`
    steps or :data:`~metamorph.studies.workflow_perturb.gate.MAX_GATE_EDGES` edges), a golden with a broken graph, a bad
    thresholds file, ids missing or duplicated where pairs are matched by id, or no encoder
    available; one line naming the file (and row and field); **3** the gate itself failed (an
    unexpected error, a bug: no verdict was reached; one line naming the error, after its
    traceback).

Workflow files (``--golden``, ``--candidate``)
----------------------------------------------
* WorFBench text: ``Node:`` lines ``k: step`` then ``Edge: (START,1) (1,2) ... (n,END)``
  (:func:`metamorph.studies.workflow_perturb.workflows.parse_workflow_text`) — one workflow, no id;
* a JSON object ``{"nodes": [...], "edges": [[u, v], ...]}`` (optional ``"id"``); nodes are
  strings or ``{"id", "text"}`` objects, edge endpoints node numbers or ``START``/``END``; an
  absent ``edges`` means the linear chain START → 1 → … → n → END. ``gold_nodes``/``gold_edges``
  or a text field ``workflow``/``gold_raw`` (WorFBench text) are accepted instead;
* JSONL (one such object per line) or a JSON array of them, each with an ``"id"`` (or
  ``"workflow_id"``).

Every workflow, whatever its format, passes the same checks when its file is read, before any
metric (:func:`check_workflow`): at most :data:`~metamorph.studies.workflow_perturb.gate.MAX_GATE_STEPS` steps and
:data:`~metamorph.studies.workflow_perturb.gate.MAX_GATE_EDGES` edges, no step empty or only whitespace, no step over
:data:`metamorph.datasets.MAX_FIELD_CHARS` characters, every edge endpoint a step, START or END, and
no cycle in the edges (the error names the file, row, field and workflow id).

When both files hold exactly one workflow they are paired whatever their ids; otherwise pairs are
matched by id (every workflow needs a unique id). A golden without a candidate is a failure; a
candidate without a golden is reported and ignored. The golden's graph must be well formed
(:func:`metamorph.studies.workflow_perturb.workflows.graph_problem` with at least one step); a
candidate's edges must name its steps (or START/END) and make no cycle — a cyclic candidate is bad
input (exit 2), not scored; a candidate may leave START/END unconnected (the metric counts it).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metamorph.datasets import JSONTooDeep, loads, read_text, refuse_duplicate_keys, value_problem
from metamorph.errors import InputError, mask_secrets
from metamorph.studies.workflow_perturb import gate

__all__ = ["COMMANDS", "GateWorkflow", "add_gate_arguments", "check_workflow", "pair_workflows", "read_workflow_file"]

_TEXT_FIELDS = ("workflow", "gold_raw", "text")
_REPORTED = ("n_gold_steps", "n_pred_steps", "n_aligned", *gate.GATE_METRICS)


@dataclass(frozen=True)
class GateWorkflow:
    """One workflow read from a gate input file: ``wid`` (None without an id), steps, edges, and
    where it came from (``row`` is the 1-based line/element, None for a whole-file workflow;
    ``nodes_field``/``edges_field`` the JSON keys they were read from, None for WorFBench text
    that is the whole file)."""

    wid: str | None
    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    source: str
    row: int | None = None
    nodes_field: str | None = None
    edges_field: str | None = None


def _size_problem(n_steps: int, n_edges: int) -> tuple[str, str] | None:
    """``(which, problem)`` when a workflow is over the gate's size bound, else None."""
    if n_steps > gate.MAX_GATE_STEPS:
        return "nodes", (
            f"has {n_steps:,} steps; the gate scores at most {gate.MAX_GATE_STEPS:,} per workflow "
            "(its metrics grow with the square of the steps)"
        )
    if n_edges > gate.MAX_GATE_EDGES:
        return "edges", (
            f"has {n_edges:,} edges; the gate scores at most {gate.MAX_GATE_EDGES:,} per workflow "
            f"(a DAG on {gate.MAX_GATE_STEPS:,} steps has no more without repeating one)"
        )
    return None


def _label(w: GateWorkflow, role: str) -> str:
    """``"golden workflow 'id': "`` — the words an error about a whole workflow starts with."""
    words = f"{role} workflow" if role else "workflow"
    if w.wid is not None:
        return f"{words} {w.wid!r}: "
    return f"{words}: " if role else ""


def check_workflow(w: GateWorkflow, role: str = "") -> GateWorkflow:
    """The checks every workflow of a gate input passes, whatever its format (JSON object, JSONL,
    JSON array, WorFBench text), before any metric: at most :data:`~metamorph.studies.workflow_perturb.gate.MAX_GATE_STEPS`
    steps and :data:`~metamorph.studies.workflow_perturb.gate.MAX_GATE_EDGES` edges, no step empty or only
    whitespace, no step over :data:`metamorph.datasets.MAX_FIELD_CHARS` characters, every edge endpoint
    a step number, START or END, and no cycle in the edges
    (:func:`metamorph.studies.workflow_perturb.workflows.find_cycle`; a workflow is a DAG, §3.1, and
    its order metrics have no meaning on a cycle). Returns ``w``.

    Raises:
        InputError: naming ``w.source``, its row and the field of the steps or edges (``edges`` for a
            WorFBench text file); a cycle error starts with ``<role> workflow '<id>': `` and names the
            cycle (``2 -> 3 -> 2``).
    """
    from metamorph.studies.workflow_perturb.workflows import find_cycle

    size = _size_problem(len(w.nodes), len(w.edges))
    if size is not None:
        raise InputError(w.source, size[1], row=w.row, field=w.nodes_field if size[0] == "nodes" else w.edges_field)
    for k, text in enumerate(w.nodes, start=1):
        if not text.strip():
            raise InputError(w.source, f"node {k} has an empty description", row=w.row, field=w.nodes_field)
        problem = value_problem(text)
        if problem is not None:
            raise InputError(w.source, f"node {k} {problem}", row=w.row, field=w.nodes_field)
    valid = {str(k) for k in range(1, len(w.nodes) + 1)} | {"START", "END"}
    for u, v in w.edges:
        for x in (u, v):
            if str(x) not in valid:
                raise InputError(
                    w.source,
                    f"edge ({u},{v}) names node {str(x)!r}, which does not exist (nodes are 1..{len(w.nodes)})",
                    row=w.row,
                    field=w.edges_field,
                )
    cycle = find_cycle(w.edges, order=["START", *(str(k) for k in range(1, len(w.nodes) + 1)), "END"])
    if cycle:
        raise InputError(
            w.source,
            f"{_label(w, role)}edges form a cycle: " + " -> ".join(cycle),
            row=w.row,
            field=w.edges_field or "edges",
        )
    return w


def _endpoint(x: Any, source: str, row: int | None, field: str) -> str:
    if isinstance(x, bool):
        raise InputError(source, f"edge endpoint {x!r} is not a node number, START or END", row=row, field=field)
    if isinstance(x, int):
        return str(x)
    s = str(x).strip()
    return s.upper() if s.upper() in ("START", "END") else s


def _graph(obj: dict, source: str, row: int | None, role: str) -> GateWorkflow:
    from metamorph.studies.workflow_perturb.metrics import chain_edges
    from metamorph.studies.workflow_perturb.workflows import parse_workflow_text

    from metamorph.datasets import value_problem

    for key, value in obj.items():
        problem = value_problem(value)
        if problem is not None:
            raise InputError(source, problem, row=row, field=str(key))
    wid = obj.get("id", obj.get("workflow_id"))
    wid = None if wid is None else str(wid)
    for nf, ef in (("nodes", "edges"), ("gold_nodes", "gold_edges")):
        if nf in obj:
            raw_nodes, raw_edges = obj[nf], obj.get(ef)
            break
    else:
        text_field = next((f for f in _TEXT_FIELDS if isinstance(obj.get(f), str)), None)
        if text_field is None:
            raise InputError(
                source,
                "a workflow object needs 'nodes' (+ 'edges'), 'gold_nodes' (+ 'gold_edges') "
                f"or a WorFBench text field {list(_TEXT_FIELDS)}; has {sorted(obj)}",
                row=row,
            )
        nodes, edges = parse_workflow_text(obj[text_field], source, row, text_field)
        return check_workflow(GateWorkflow(wid, nodes, edges, source, row, text_field, text_field), role)
    if not isinstance(raw_nodes, list):
        raise InputError(source, f"must be a list of steps, got {type(raw_nodes).__name__}", row=row, field=nf)
    size = _size_problem(len(raw_nodes), len(raw_edges) if isinstance(raw_edges, list) else 0)
    if size is not None:  # before any step or edge is looked at
        raise InputError(source, size[1], row=row, field=nf if size[0] == "nodes" else ef)
    nodes = []
    for k, node in enumerate(raw_nodes, start=1):
        if isinstance(node, str):
            nodes.append(node)
        elif isinstance(node, dict) and isinstance(node.get("text"), str):
            if "id" in node and str(node["id"]).strip() != str(k):
                raise InputError(
                    source, f"node ids must be 1..n in list order; node {k} has id {node['id']!r}", row=row, field=nf
                )
            nodes.append(node["text"])
        else:
            raise InputError(
                source, f"node {k} must be a string or {{'id', 'text'}}, got {node!r:.60}", row=row, field=nf
            )
    if raw_edges is None:
        edges = chain_edges(len(nodes))
    else:
        if not isinstance(raw_edges, list):
            raise InputError(
                source, f"must be a list of [from, to] pairs, got {type(raw_edges).__name__}", row=row, field=ef
            )
        edges = []
        for e in raw_edges:
            if not isinstance(e, (list, tuple)) or len(e) != 2:
                raise InputError(source, f"an edge must be a [from, to] pair, got {e!r:.60}", row=row, field=ef)
            edges.append((_endpoint(e[0], source, row, ef), _endpoint(e[1], source, row, ef)))
    return check_workflow(GateWorkflow(wid, tuple(nodes), tuple(edges), source, row, nf, ef), role)


def read_workflow_file(path: str | Path, role: str = "") -> list[GateWorkflow]:
    """Every workflow of a gate input file (formats in the module docstring); ``role`` (``golden``,
    ``candidate``) is the word errors about a whole workflow use.

    Raises:
        InputError: the file is missing, unreadable, not UTF-8 (line and column named) or empty; a
            JSON/JSONL record is not valid JSON or not an object, or holds a non-finite number or a
            lone surrogate (:func:`metamorph.datasets.value_problem`), or gives a key twice, or is nested
            deeper than the JSON parser follows; a workflow cannot be parsed or fails
            :func:`check_workflow`. The message names the file (and the line/element and field
            when it applies).
    """
    from metamorph.studies.workflow_perturb.workflows import parse_workflow_text

    p = Path(path)
    src = str(p)
    if not p.exists():
        raise InputError(src, "file not found")
    if not p.is_file():
        raise InputError(src, "not a regular file")
    text = read_text(p)  # a leading byte-order mark is dropped before the format is told by '{' / '['
    stripped = text.strip()
    if not stripped:
        raise InputError(src, "the file is empty")
    if stripped[0] not in "{[":
        nodes, edges = parse_workflow_text(text, src)
        return [check_workflow(GateWorkflow(None, nodes, edges, src), role)]
    try:
        data = loads(stripped)
    except JSONTooDeep as exc:
        raise InputError(src, f"not valid JSON: {exc.msg}") from None
    except json.JSONDecodeError:
        data = None
        out = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    src, f"neither one JSON document nor JSONL: line {i} is not valid JSON ({exc.msg})", row=i
                ) from None
            if not isinstance(obj, dict):
                raise InputError(src, f"a JSONL line must be a workflow object, got {type(obj).__name__}", row=i)
            refuse_duplicate_keys(obj, src, row=i)
            out.append(_graph(obj, src, i, role))
        return out
    if isinstance(data, dict):
        refuse_duplicate_keys(data, src)
        return [_graph(data, src, None, role)]
    if isinstance(data, list) and data:
        out = []
        for i, obj in enumerate(data, start=1):
            if not isinstance(obj, dict):
                raise InputError(src, f"array element must be a workflow object, got {type(obj).__name__}", row=i)
            refuse_duplicate_keys(obj, src, row=i)
            out.append(_graph(obj, src, i, role))
        return out
    raise InputError(src, "expected a workflow object, a non-empty array of them, JSONL or WorFBench text")


def _check_golden(w: GateWorkflow) -> None:
    from metamorph.studies.workflow_perturb.workflows import graph_problem

    problem = graph_problem(w.nodes, w.edges, min_nodes=1)
    if problem is not None:
        field, what = problem
        named = w.nodes_field if field == "nodes" else w.edges_field
        raise InputError(w.source, _label(w, "golden") + what, row=w.row, field=named or field)


def _ids(ws: list[GateWorkflow], role: str) -> dict[str, GateWorkflow]:
    out: dict[str, GateWorkflow] = {}
    for w in ws:
        if w.wid is None:
            raise InputError(
                w.source,
                f"every {role} workflow needs an 'id' when pairs are matched by id "
                "(a file holds more than one workflow)",
                row=w.row,
                field="id",
            )
        if w.wid in out:
            raise InputError(w.source, f"duplicate {role} id {w.wid!r}", row=w.row, field="id")
        out[w.wid] = w
    return out


def pair_workflows(
    golden: list[GateWorkflow], candidate: list[GateWorkflow]
) -> tuple[list[tuple[str, GateWorkflow, GateWorkflow]], list[str], list[str]]:
    """``(pairs, missing candidate ids, extra candidate ids)``: one-to-one files are paired
    directly; otherwise by id (see the module docstring). Raises :class:`InputError` for missing
    or duplicate ids."""
    if len(golden) == 1 and len(candidate) == 1:
        g, c = golden[0], candidate[0]
        return [(g.wid or c.wid or "workflow", g, c)], [], []
    gi, ci = _ids(golden, "golden"), _ids(candidate, "candidate")
    pairs = [(k, g, ci[k]) for k, g in gi.items() if k in ci]
    return pairs, [k for k in gi if k not in ci], [k for k in ci if k not in gi]


# --------------------------------------------------------------------------- printing


def _fmt(v: float | None) -> str:
    return "undefined" if v is None else f"{v:.4f}"


def _check_text(c: gate.MetricCheck) -> str:
    if c.threshold is None:
        return f"{c.metric}={_fmt(c.value)} (no threshold)"
    mark = "BREACH" if c.breached else "ok" if c.breached is False else "undefined"
    return f"{c.metric}={_fmt(c.value)} {gate.COMPARISON} {c.threshold:g}? {mark}"


def _print_text(
    report: gate.GateReport, th: gate.Thresholds, metrics: dict[str, dict], encoder: str | None, out
) -> None:
    rule = {
        "any": "ANY defined primary metric breaches (secondary metrics reported only)",
        "joint": "EVERY defined primary metric breaches (secondary metrics reported only)",
    }.get(
        report.mode,
        "a defined primary AND a defined secondary metric breach (the primary alone when no secondary is defined)",
    )
    print(
        f"metamorph gate — thresholds: {th.source}; mode {report.mode}: a failure mode fires when {rule} "
        f"(breach = value {gate.COMPARISON} threshold)",
        file=out,
    )
    if encoder:
        print(f"encoder: {encoder}", file=out)
    for pid, res in report.pairs:
        m = metrics.get(pid, {})
        print(
            f"\npair {pid}: {m.get('n_gold_steps')} golden steps, {m.get('n_pred_steps')} candidate steps, "
            f"{m.get('n_aligned')} aligned",
            file=out,
        )
        for b in res.bundles:
            prim = "; ".join(_check_text(c) for c in b.primary)
            sec = "; ".join(_check_text(c) for c in b.secondary) or "none"
            note = (
                ""
                if b.secondary_evaluated or report.mode != "primary_and_secondary"
                else "  (no secondary defined: decided by the primary alone)"
            )
            print(f"  {b.verdict:<9} {b.name} [{b.failure_mode}]  primary: {prim}  |  secondary: {sec}{note}", file=out)
    for k in report.missing_candidates:
        print(f"\nFAIL      golden {k!r} has no candidate workflow", file=out)
    for k in report.extra_candidates:
        print(f"\nnote: candidate {k!r} has no golden workflow; ignored", file=out)
    print("\nsummary:", file=out)
    for s in report.mode_summary():
        print(
            f"  {s['verdict']:<9} {s['name']} [{s['failure_mode']}]: fired on {s['n_fired']} of {s['n_pairs']} "
            f"pair(s)" + (f" ({', '.join(s['fired_pairs'])})" if s["fired_pairs"] else ""),
            file=out,
        )
    if report.missing_candidates:
        print(f"  FAIL      {len(report.missing_candidates)} golden workflow(s) without a candidate", file=out)
    print(f"result: {report.verdict} (exit {report.exit_code})", file=out)


# --------------------------------------------------------------------------- gate command


def _bad_input(args: argparse.Namespace, message: str) -> int:
    print(f"metamorph gate: error: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps({"verdict": "ERROR", "exit_code": gate.EXIT_BAD_INPUT, "error": message}))
    return gate.EXIT_BAD_INPUT


def _run_gate(args: argparse.Namespace) -> int:
    """``metamorph gate``: :func:`_gate`, with an unexpected failure given its own exit code
    (:data:`~metamorph.studies.workflow_perturb.gate.EXIT_INTERNAL`, 3) — never 1, which CI reads as a
    regression of the candidate. The traceback goes to stderr, then one line naming the error."""
    try:
        return _gate(args)
    except (BrokenPipeError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - every unexpected failure is reported as such, with exit 3
        import traceback

        traceback.print_exc(file=sys.stderr)
        message = mask_secrets(" ".join(f"{type(exc).__name__}: {exc}".split()))[:500]
        print(
            f"metamorph gate: internal error: {message} (the gate failed and reached no verdict; "
            f"this is not a regression of the candidate) — exit {gate.EXIT_INTERNAL}",
            file=sys.stderr,
        )
        if getattr(args, "json", False):
            print(json.dumps({"verdict": "ERROR", "exit_code": gate.EXIT_INTERNAL, "error": message}))
        return gate.EXIT_INTERNAL


def _gate(args: argparse.Namespace) -> int:
    try:
        th = gate.load_thresholds(args.thresholds)
        golden = read_workflow_file(args.golden, "golden")
        candidate = read_workflow_file(args.candidate, "candidate")
        for g in golden:
            _check_golden(g)
        pairs, missing, extra = pair_workflows(golden, candidate)
    except InputError as exc:
        return _bad_input(args, str(exc))

    metrics: dict[str, dict[str, Any]] = {}
    encoder_name = None
    if pairs:
        from metamorph.embeddings import load_encoder
        from metamorph.studies.workflow_perturb.metrics import score_workflows

        try:
            encoder = load_encoder(prefer=args.encoder)
        except (RuntimeError, ValueError, OSError) as exc:
            return _bad_input(args, f"no sentence encoder available: {exc}")
        encoder_name = encoder.name
        try:
            scored = score_workflows([((g.nodes, g.edges), (c.nodes, c.edges)) for _, g, c in pairs], encoder)
        except ValueError as exc:  # a golden edge the metric rejects
            return _bad_input(args, f"{args.golden}: {exc}")
        metrics = {pid: s for (pid, _, _), s in zip(pairs, scored)}
    report = gate.gate_report(
        ((pid, metrics[pid]) for pid, _, _ in pairs), th, args.mode, missing_candidates=missing, extra_candidates=extra
    )
    if args.json:
        doc = report.to_dict()
        doc["thresholds_source"] = th.source
        doc["encoder"] = encoder_name
        doc["golden"], doc["candidate"] = str(args.golden), str(args.candidate)
        for entry in doc["pairs"]:
            m = metrics.get(entry["id"], {})
            entry["metrics"] = {k: m.get(k) for k in _REPORTED}
            entry["reasons"] = {
                k: m.get(f"{k}_reason")
                for k in ("chain", "graph", "bleu", "gleu", "bertscore", "kendall_tau")
                if m.get(f"{k}_reason")
            }
        print(json.dumps(doc, indent=2))
    else:
        _print_text(report, th, metrics, encoder_name, sys.stdout)
    return report.exit_code


def add_gate_arguments(g: argparse.ArgumentParser) -> None:
    """The arguments of ``metamorph gate`` (see the module docstring)."""
    g.add_argument(
        "--golden", required=True, help="golden workflow(s): WorFBench text, JSON object, JSON array or JSONL"
    )
    g.add_argument("--candidate", required=True, help="candidate workflow(s), same formats; matched to goldens by id")
    g.add_argument(
        "--thresholds",
        default=None,
        help="thresholds JSON (format of metamorph/studies/workflow_perturb/data/gate_thresholds.json, e.g. a recalibration); "
        "default: the packaged Table-1 defaults",
    )
    g.add_argument(
        "--mode",
        choices=gate.MODES,
        default=gate.DEFAULT_MODE,
        help="primary_and_secondary (default, Table 1): a failure mode fires when a primary and a "
        "secondary metric breach (the primary alone when no secondary is defined); "
        "any: when any primary metric breaches; joint: when every primary metric breaches",
    )
    g.add_argument(
        "--encoder",
        choices=("mpnet", "minilm"),
        default="mpnet",
        help="sentence encoder for alignment and BERTScore (mpnet falls back to MiniLM)",
    )
    g.add_argument("--json", action="store_true", help="print one JSON object instead of text")


#: Subcommands this study adds to the ``metamorph`` console script (see :mod:`metamorph.cli`):
#: name -> (help, description, add_arguments, run(args) -> exit code).
COMMANDS = {
    "gate": (
        "CI/CD regression gate on workflow metric bundles (WorkflowPerturb Table 1).",
        "Score candidate workflows against golden ones and fail on a regression. "
        "Exit 0 = pass, 1 = regression, 2 = bad input, 3 = the gate itself failed (no verdict).",
        add_gate_arguments,
        _run_gate,
    ),
}
