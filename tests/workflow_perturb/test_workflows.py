"""Workflow graphs: WorFBench Node:/Edge: text, §3.1 validation, loaders, embedded goldens."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from metamorph.errors import InputError
from metamorph.studies.workflow_perturb.workflows import (
    END,
    START,
    Workflow,
    find_cycle,
    format_workflow,
    load_goldens,
    off_path_nodes,
    parse_workflow_text,
    size_stratum,
    validate_workflow,
    workflow_from_row,
)
from metamorph.studies.workflow_perturb.goldens import embedded_goldens
from tests.conftest import shared_sample


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _structured(row):
    return tuple(n["text"] for n in row["gold_nodes"]), tuple(tuple(e) for e in row["gold_edges"])


# ------------------------------------------------------------------------------------------
# Real WorFBench sample


def test_round_trip_on_every_shared_worfbench_row():
    path = shared_sample("worfbench")
    rows = _rows(path)
    assert len(rows) == 300
    canonical = 0
    for r in rows:
        nodes, edges = parse_workflow_text(r["gold_raw"], str(path), field="gold_raw")
        assert (nodes, edges) == _structured(r), r["id"]  # the tolerant parser agrees with the structured fields
        text = format_workflow((nodes, edges))
        assert parse_workflow_text(text) == (nodes, edges)  # format then parse is the identity
        assert format_workflow(parse_workflow_text(text)) == text  # and parse then format on canonical text
        canonical += text == r["gold_raw"]
    # 280 rows are byte-identical to the canonical form; 20 have prose, bullets, commas or odd spacing
    assert canonical == 280


def test_shared_sample_validation_counts():
    path = shared_sample("worfbench")
    valid, rejected = load_goldens(str(path), on_invalid="collect")
    assert (len(valid), len(rejected)) == (300, 0)
    assert load_goldens(str(path))[0] == valid
    assert Counter(w.size_stratum for w in valid) == {"5-7": 231, "8-15": 69}
    assert Counter(w.source for w in valid) == {
        "alfworld": 157,
        "wikihow": 100,
        "lumos": 20,
        "webshop": 15,
        "os": 5,
        "toolalpaca": 2,
        "toolbench": 1,
    }
    off = {w.workflow_id: off_path_nodes(w) for w in valid if off_path_nodes(w)}
    assert off == {
        "wikihow_117": ("1",),
        "lumos_21358": ("3", "4", "5"),
        "wikihow_105": ("2", "3", "8", "9", "10", "11"),
        "wikihow_136": ("4",),
        "wikihow_48": ("4",),
        "wikihow_141": ("1", "2"),
    }
    first = valid[0]
    assert first.workflow_id == "alfworld_1613" and first.task == "put two pillow in ottoman."
    assert first.nodes[:2] == ("go to sofa 1", "take pillow 1 from sofa 1") and first.edges[0] == (START, "1")


# ------------------------------------------------------------------------------------------
# Text format


def test_parser_tolerates_whitespace_and_decoration_variants():
    text = (
        "Here is the workflow:\r\n```\r\n**Node:**\r\n1:  Open VLC. \r\n\r\n2:Click File.\r\n- 3) Click Open\r\n"
        "4. Pick a source\r\nSome explanation line.\r\n5: Click Record\r\n**Edge:**\r\n- (START, 1): start here\r\n"
        "- (1 ,2), (2,3)\r\n(3,4) (4, 5)\r\n(5,end)\r\n```\r\nThis ends the plan."
    )
    nodes, edges = parse_workflow_text(text)
    assert nodes == ("Open VLC.", "Click File.", "Click Open", "Pick a source", "Click Record")
    assert edges == ((START, "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", "5"), ("5", END))


def test_format_is_the_canonical_text():
    w = Workflow(
        "w",
        "t",
        ("a", "b", "c", "d", "e"),
        ((START, "1"), ("1", "2"), ("1", "3"), ("2", "4"), ("3", "4"), ("4", "5"), ("5", END)),
    )
    text = format_workflow(w)
    assert text == "Node:\n1: a\n2: b\n3: c\n4: d\n5: e\nEdge: (START,1) (1,2) (1,3) (2,4) (3,4) (4,5) (5,END)"
    assert parse_workflow_text(text) == (w.nodes, w.edges) and w.to_text() == text


@pytest.mark.parametrize(
    "text, problem",
    [
        ("Node:\n1: a\n2: b", "no 'Edge:' line in the workflow text"),
        ("Node:\nnothing numbered\nEdge: (START,END)", "no node lines ('<k>: <step>') before 'Edge:'"),
        ("Node:\n1: a\n3: b\nEdge: (START,1)", "node ids must be 1..2 in order, got [1, 3]"),
        ("Node:\n1: a\n2:\nEdge: (START,1)", "node 2 has an empty description"),
        ("Node:\n1: a\nEdge: none", "no '(u,v)' edge after 'Edge:'"),
    ],
)
def test_parse_errors_are_exact(text, problem):
    with pytest.raises(InputError) as exc:
        parse_workflow_text(text, "f.jsonl", row=3, field="gold_raw")
    assert str(exc.value) == f"f.jsonl, row 3, field 'gold_raw': {problem}"


# ------------------------------------------------------------------------------------------
# §3.1 validation


def _w(n, edges, wid="bad"):
    return Workflow(wid, "task", tuple(f"step {i}" for i in range(1, n + 1)), edges)


CHAIN5 = ((START, "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", "5"), ("5", END))


@pytest.mark.parametrize(
    "w, field, problem",
    [
        (
            _w(5, ((START, "1"), ("1", "2"), ("2", "3"), ("3", "2"), ("3", "4"), ("4", "5"), ("5", END))),
            "edges",
            "edges form a cycle: 2 -> 3 -> 2",
        ),
        (
            _w(5, ((START, "1"), ("1", "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", "5"), ("5", END))),
            "edges",
            "edges form a cycle: 1 -> 1",
        ),
        (
            _w(4, ((START, "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", END))),
            "nodes",
            "has 4 nodes; at least 5 are required (§3.1)",
        ),
        (_w(5, CHAIN5 + (("3", "7"),)), "edges", "edge (3,7) names node '7', which does not exist (nodes are 1..5)"),
        (_w(5, CHAIN5[1:]), "edges", "START has no outgoing edge"),
        (_w(5, CHAIN5[:-1]), "edges", "END has no incoming edge"),
        (_w(5, CHAIN5 + (("2", START),)), "edges", "edge (2,START) points into START"),
        (_w(5, CHAIN5 + ((END, "2"),)), "edges", "edge (END,2) leaves END"),
    ],
)
def test_invalid_graphs_give_the_exact_error(w, field, problem):
    with pytest.raises(InputError) as exc:
        validate_workflow(w, "goldens.jsonl", row=7, nodes_field="gold_nodes", edges_field="gold_edges")
    assert exc.value.field == f"gold_{field}"
    assert str(exc.value) == f"goldens.jsonl, row 7, field 'gold_{field}': workflow 'bad': {problem}"


def test_find_cycle_none_on_a_dag():
    assert find_cycle(CHAIN5) is None
    assert find_cycle([("a", "b"), ("b", "c"), ("c", "a")]) == ["a", "b", "c", "a"]


def test_size_strata():
    assert [size_stratum(n) for n in (4, 5, 7, 8, 15, 16, 40)] == ["<5", "5-7", "5-7", "8-15", "8-15", "16+", "16+"]


# ------------------------------------------------------------------------------------------
# Loaders


def _row(wid, n=5, edges=None, **extra):
    row = {
        "id": wid,
        "task": f"task {wid}",
        "source": "test",
        "gold_nodes": [{"id": str(i), "text": f"step {i}"} for i in range(1, n + 1)],
        "gold_edges": [
            list(e) for e in (edges or [(START, "1"), *((str(i), str(i + 1)) for i in range(1, n)), (str(n), END)])
        ],
    }
    row.update(extra)
    return row


def _write(tmp_path, rows, name="goldens.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return str(p)


def test_load_goldens_rejects_invalid_rows_or_collects_them(tmp_path):
    path = _write(tmp_path, [_row("a"), _row("small", n=4), _row("b", n=6)])
    with pytest.raises(InputError) as exc:
        load_goldens(path)
    assert str(exc.value) == (
        f"{path}, row 2, field 'gold_nodes': workflow 'small': has 4 nodes; at least 5 are required (§3.1)"
    )
    valid, rejected = load_goldens(path, on_invalid="collect")
    assert [w.workflow_id for w in valid] == ["a", "b"]
    assert len(rejected) == 1
    r = rejected[0]
    assert (r.workflow_id, r.source, r.row, r.field, r.n_nodes) == ("small", path, 2, "gold_nodes", 4)
    assert r.reason == "workflow 'small': has 4 nodes; at least 5 are required (§3.1)"


def test_load_goldens_is_all_or_nothing_on_malformed_rows(tmp_path):
    dup = _write(tmp_path, [_row("a"), _row("b"), _row("a")], "dup.jsonl")
    with pytest.raises(InputError) as exc:
        load_goldens(dup, on_invalid="collect")
    assert str(exc.value) == f"{dup}, row 3, field 'id': duplicate workflow id 'a' (first at row 1)"
    no_task = _write(tmp_path, [_row("a"), {**_row("b"), "task": " "}], "task.jsonl")
    with pytest.raises(InputError, match=r"row 2, field 'task': missing or empty"):
        load_goldens(no_task, on_invalid="collect")
    no_graph = _write(tmp_path, [{"id": "x", "task": "t"}], "graph.jsonl")
    with pytest.raises(
        InputError, match=r"row 1, field 'gold_nodes': a golden needs gold_nodes \+ gold_edges or gold_raw"
    ):
        load_goldens(no_graph)
    with pytest.raises(InputError, match="file does not exist"):
        load_goldens(str(tmp_path / "missing.jsonl"))


def test_load_goldens_reads_gold_raw_and_parquet(tmp_path):
    import pandas as pd

    w = embedded_goldens()[0]
    raw_only = _write(tmp_path, [{"id": "r1", "task": "t", "gold_raw": format_workflow(w)}], "raw.jsonl")
    (got,), _ = load_goldens("worfbench:" + raw_only)
    assert (got.nodes, got.edges, got.source) == (w.nodes, w.edges, raw_only)
    broken = _write(tmp_path, [{"id": "r1", "task": "t", "gold_raw": "Node:\n1: a\n3: b\nEdge: (START,1)"}], "b.jsonl")
    with pytest.raises(InputError) as exc:
        load_goldens(broken)
    assert str(exc.value) == f"{broken}, row 1, field 'gold_raw': node ids must be 1..2 in order, got [1, 3]"
    pq = tmp_path / "goldens.parquet"
    pd.DataFrame([_row("p1", n=6), _row("p2")]).to_parquet(pq)  # nested lists come back as numpy arrays
    valid, _ = load_goldens(str(pq))
    assert [(v.workflow_id, v.n_nodes, v.edges[-1]) for v in valid] == [("p1", 6, ("6", END)), ("p2", 5, ("5", END))]


def test_workflow_from_row_prefers_the_structured_fields():
    row = _row("s", gold_raw="not a workflow")
    w, nodes_field, edges_field = workflow_from_row(row, "f", 1)
    assert (w.n_nodes, nodes_field, edges_field) == (5, "gold_nodes", "gold_edges")


# ------------------------------------------------------------------------------------------
# Embedded goldens


def test_embedded_goldens_cover_the_size_strata_and_are_valid_dags():
    ws = embedded_goldens()
    assert len(ws) >= 12
    assert len({w.workflow_id for w in ws}) == len(ws)
    assert all(5 <= w.n_nodes <= 20 for w in ws)
    assert Counter(w.size_stratum for w in ws) == {"5-7": 4, "8-15": 5, "16+": 4}
    branching = [w for w in ws if any(len(s) > 1 for s in w.successors().values())]
    assert len(branching) == 11  # all but the two linear chains have parallel branches
    for w in ws:
        validate_workflow(w)
        assert off_path_nodes(w) == ()
        assert parse_workflow_text(format_workflow(w)) == (w.nodes, w.edges)
    valid, rejected = load_goldens("embedded")
    assert valid == ws and rejected == []


def test_the_shared_sample_reads_the_same_goldens_from_jsonl_json_csv_and_parquet(tmp_path):
    """``gold_nodes`` and ``gold_edges`` are JSON text in CSV cells, decoded by the shared reader."""
    from tests.formats import head_rows, same_items, write_formats

    rows = head_rows(shared_sample("worfbench"), 4)
    paths = write_formats(rows, tmp_path, "worfbench")
    goldens = {fmt: load_goldens(str(p), on_invalid="collect") for fmt, p in paths.items()}
    assert sum(len(part) for part in goldens["jsonl"]) == 4
    texts = same_items(goldens, paths)
    assert texts["json"] == texts["csv"] == texts["parquet"] == texts["jsonl"]
