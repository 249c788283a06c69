"""The CI/CD gate (arXiv 2602.17990 §6, Table 1): verdict logic at the exact threshold
boundary, thresholds files, and ``metamorph gate`` exit codes through ``main([...])``.

Boundary convention under test: a metric breaches iff ``value < threshold`` — a value equal to
the threshold (e.g. Graph F1 = 0.75 against "< 0.75") does NOT breach.

Only the two CLI scoring tests load a real encoder (all-MiniLM-L6-v2, ``--encoder minilm``), on
one 6-step workflow each.
"""

from __future__ import annotations

import json

import pytest

from metamorph import cli
from metamorph.studies.workflow_perturb import cli as gate_cli
from metamorph.studies.workflow_perturb import gate

AT_THRESHOLD = {
    "graph_f1": 0.75,
    "chain_f1": 0.75,
    "kendall_tau": 0.65,
    "bleu": 0.70,
    "gleu": 0.70,
    "bertscore_f1": 0.9,
    "judge": None,
}


# --------------------------------------------------------------------------- defaults


def test_default_thresholds_are_table_1():
    th = gate.default_thresholds()
    assert th.failure_modes == ("missing", "compressed", "description")
    assert dict(th.bundle("missing").primary) == {"graph_f1": 0.75, "chain_f1": 0.75}
    assert dict(th.bundle("missing").secondary) == {"judge": 0.70}
    assert dict(th.bundle("compressed").primary) == {"kendall_tau": 0.65}
    assert dict(th.bundle("compressed").secondary) == {"graph_f1": 0.75, "chain_f1": 0.75}
    assert dict(th.bundle("description").primary) == {"bleu": 0.70, "gleu": 0.70}
    assert dict(th.bundle("description").secondary) == {"bertscore_f1": 0.85}
    assert gate.DEFAULT_MODE == "primary_and_secondary"


# --------------------------------------------------------------------------- verdicts


def test_value_equal_to_threshold_does_not_breach():
    assert gate.breaches(0.75, 0.75) is False
    assert gate.breaches(0.7499999999, 0.75) is True
    assert gate.breaches(None, 0.75) is None
    # float artefacts never decide: 2PR/(P+R) with P = 3/3, R = 3/5 is 0.7499999999999999
    assert 2 * (3 / 3) * (3 / 5) / (3 / 3 + 3 / 5) < 0.75
    assert gate.breaches(2 * (3 / 3) * (3 / 5) / (3 / 3 + 3 / 5), 0.75) is False
    assert gate.breaches(0.65 + 1e-12, 0.65) is False and gate.breaches(0.65 - 1e-12, 0.65) is False
    for mode in gate.MODES:
        r = gate.evaluate_gate(AT_THRESHOLD, mode=mode)
        assert r.verdict == "PASS" and r.fired_modes == ()
        assert [b.verdict for b in r.bundles] == ["PASS", "PASS", "PASS"]


def test_any_fires_on_one_primary_joint_needs_all():
    m = dict(AT_THRESHOLD, graph_f1=0.7499)
    any_ = gate.evaluate_gate(m, mode="any")
    joint = gate.evaluate_gate(m, mode="joint")
    assert any_.bundle("missing").verdict == "FAIL" and any_.fired_modes == ("missing",)
    assert joint.bundle("missing").verdict == "PASS" and joint.verdict == "PASS"
    both = gate.evaluate_gate(dict(m, chain_f1=0.5), mode="joint")
    assert both.bundle("missing").verdict == "FAIL" and both.verdict == "FAIL"
    checks = {c.metric: c for c in any_.bundle("missing").primary}
    assert checks["graph_f1"].breached is True and checks["chain_f1"].breached is False
    assert checks["graph_f1"].threshold == 0.75 and checks["graph_f1"].value == 0.7499


def test_primary_and_secondary_must_both_breach_by_default():
    # Description Changes: BLEU breaches; BERTScore 0.99 (meaning kept) does not -> a benign paraphrase
    para = dict(AT_THRESHOLD, bleu=0.4, gleu=0.4, bertscore_f1=0.99)
    assert gate.evaluate_gate(para).bundle("description").verdict == "PASS"
    assert gate.evaluate_gate(para, mode="any").bundle("description").verdict == "FAIL"
    # ... and BERTScore 0.8 (meaning changed) as well -> the bundle fires; exactly at 0.85 it does not
    assert gate.evaluate_gate(dict(para, bertscore_f1=0.8)).bundle("description").verdict == "FAIL"
    assert gate.evaluate_gate(dict(para, bertscore_f1=0.85)).bundle("description").verdict == "PASS"
    # Missing Steps with a judge: structural F1 breaches, judge 0.8 does not -> PASS; judge 0.6 -> FAIL
    miss = dict(AT_THRESHOLD, graph_f1=0.6, judge=0.8)
    r = gate.evaluate_gate(miss).bundle("missing")
    assert (r.verdict, r.secondary_evaluated) == ("PASS", True)
    assert gate.evaluate_gate(dict(miss, judge=0.6)).bundle("missing").verdict == "FAIL"
    # the judge was not run (None): the primary decides alone, and the result says so
    r = gate.evaluate_gate(dict(miss, judge=None)).bundle("missing")
    assert (r.verdict, r.secondary_evaluated) == ("FAIL", False)
    assert r.to_dict()["secondary_evaluated"] is False
    # a breaching secondary alone never fires
    m = dict(AT_THRESHOLD, graph_f1=0.1, chain_f1=0.1, kendall_tau=0.9)  # compressed's secondaries breach
    for mode in gate.MODES:
        b = gate.evaluate_gate(m, mode=mode).bundle("compressed")
        assert b.verdict == "PASS" and all(c.breached for c in b.secondary)
    assert gate.evaluate_gate(dict(AT_THRESHOLD, bertscore_f1=0.0)).verdict == "PASS"


def test_identical_candidate_of_a_short_golden_is_not_flagged():
    from metamorph.studies.workflow_perturb import metrics as wm

    golden = ["go to sofa"]  # 3 tokens: plain nltk BLEU-4 of an identical text is 0.5623 < 0.70
    values = {"bleu": wm.bleu(golden, golden)[0], "gleu": wm.gleu(golden, golden)[0], "bertscore_f1": 0.0}
    assert values["bleu"] == 1.0 and values["gleu"] == 1.0
    for mode in gate.MODES:
        assert gate.evaluate_gate(values, mode=mode).bundle("description").verdict == "PASS"


def test_undefined_primary_is_skipped_never_zero():
    r = gate.evaluate_gate(dict(AT_THRESHOLD, kendall_tau=None), mode="any")
    assert r.bundle("compressed").verdict == "UNDEFINED" and r.verdict == "PASS"
    nan = gate.evaluate_gate(dict(AT_THRESHOLD, kendall_tau=float("nan")))
    assert nan.bundle("compressed").verdict == "UNDEFINED"
    # joint over the defined primaries only: chain undefined, graph breaches -> fires
    j = gate.evaluate_gate(dict(AT_THRESHOLD, graph_f1=0.2, chain_f1=None), mode="joint")
    assert j.bundle("missing").verdict == "FAIL"
    # metric absent from the dict = undefined
    assert gate.evaluate_gate({}).bundle("missing").verdict == "UNDEFINED"


def test_vectorised_bundle_decisions_equal_bundle_decision_row_by_row():
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    metrics = ["chain_f1", "graph_f1", "bleu", "gleu", "bertscore_f1", "kendall_tau", "judge"]
    th = gate.default_thresholds()
    cut = sorted({t for b in th.bundles for _, t in (*b.primary, *b.secondary) if t is not None})
    cols = {}
    for m in metrics:
        v = rng.uniform(-0.2, 1.0, 400)
        v[rng.random(400) < 0.15] = np.nan  # undefined
        pick = rng.random(400) < 0.3  # on, and within 1e-11 / 1e-9 of, a threshold
        v[pick] = rng.choice(cut, pick.sum()) + rng.choice([0.0, 1e-11, -1e-11, 2e-9, -2e-9], pick.sum())
        cols[m] = v
    frame = pd.DataFrame(cols).drop(columns=["judge"])  # an absent metric is undefined
    rows = frame.to_dict("records")
    for thresholds in (th, gate.thresholds_from_dict({"failure_modes": {"missing": {"primary": {"chain_f1": 0.7}}}})):
        for b in thresholds.bundles:
            for mode in gate.MODES:
                defined, fired = gate.bundle_decisions(frame, b, mode)
                want = [gate.bundle_decision(r, b, mode) for r in rows]
                assert list(zip(defined.tolist(), fired.tolist())) == want, (b.failure_mode, mode)
                assert 0 < sum(f for _, f in want) < len(rows)  # both outcomes occur


def test_bad_metric_value_and_mode_raise():
    with pytest.raises(ValueError, match="graph_f1"):
        gate.evaluate_gate(dict(AT_THRESHOLD, graph_f1="0.5"))
    with pytest.raises(ValueError, match="mode"):
        gate.evaluate_gate(AT_THRESHOLD, mode="all")


def test_gate_report_missing_candidate_fails():
    rep = gate.gate_report([("a", AT_THRESHOLD)], missing_candidates=["b"], extra_candidates=["z"])
    assert rep.verdict == "FAIL" and rep.exit_code == 1
    ok = gate.gate_report([("a", AT_THRESHOLD), ("b", dict(AT_THRESHOLD, bleu=0.71))])
    assert ok.exit_code == 0
    bad = gate.gate_report([("a", AT_THRESHOLD), ("b", dict(AT_THRESHOLD, bleu=0.69, bertscore_f1=0.49))])
    summary = {s["failure_mode"]: s for s in bad.mode_summary()}
    assert bad.exit_code == 1 and summary["description"]["fired_pairs"] == ["b"]
    assert summary["missing"]["verdict"] == "PASS" and summary["description"]["n_fired"] == 1


# --------------------------------------------------------------------------- thresholds format


@pytest.mark.parametrize(
    "doc,msg",
    [
        ({"failure_modes": {"missing": {"primary": {"graph_f2": 0.7}}}}, "unknown metric 'graph_f2'"),
        ({"failure_modes": {"missing": {"primary": {"graph_f1": 1.5}}}}, "outside the range"),
        ({"failure_modes": {"missing": {"primary": {"kendall_tau": -1.5}}}}, "outside the range"),
        ({"failure_modes": {"missing": {"primary": {"graph_f1": None}}}}, "must be a number"),
        ({"failure_modes": {"missing": {"primary": {"graph_f1": True}}}}, "must be a number"),
        ({"failure_modes": {"missing": {"primary": {}}}}, "at least one primary"),
        ({"failure_modes": {"missing": {"primay": {"graph_f1": 0.7}}}}, "unknown key"),
        (
            {"failure_modes": {"missing": {"primary": {"bleu": 0.7}, "secondary": {"bleu": 0.5}}}},
            "both primary and secondary",
        ),
        ({"failure_modes": {}}, "non-empty object 'failure_modes'"),
        ({"comparison": "<=", "failure_modes": {"missing": {"primary": {"bleu": 0.7}}}}, "comparison"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_thresholds_format_errors(doc, msg):
    with pytest.raises(gate.ThresholdsError, match=msg):
        gate.thresholds_from_dict(doc, "t.json")


def test_load_thresholds_names_the_file(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"failure_modes": {')
    with pytest.raises(gate.ThresholdsError, match=r"bad\.json: not valid JSON"):
        gate.load_thresholds(p)
    with pytest.raises(gate.ThresholdsError, match=r"nope\.json: thresholds file not found"):
        gate.load_thresholds(tmp_path / "nope.json")


def test_thresholds_to_dict_round_trip():
    th = gate.default_thresholds()
    again = gate.thresholds_from_dict(json.loads(json.dumps(th.to_dict())))
    assert again.bundles == th.bundles


# --------------------------------------------------------------------------- CLI

STEPS = [
    "Open the project repository",
    "Install the build dependencies",
    "Run the unit test suite",
    "Build the release package",
    "Upload the package to the registry",
    "Announce the release to the team",
]


def worfbench_text(steps: list[str]) -> str:
    body = "\n".join(f"{i}: {s}" for i, s in enumerate(steps, start=1))
    edges = " ".join(
        f"({u},{v})"
        for u, v in zip(["START", *map(str, range(1, len(steps) + 1))], [*map(str, range(1, len(steps) + 1)), "END"])
    )
    return f"Node:\n{body}\nEdge: {edges}\n"


@pytest.fixture
def golden_file(tmp_path):
    p = tmp_path / "golden.txt"
    p.write_text(worfbench_text(STEPS))
    return p


def test_cli_identical_passes(golden_file, tmp_path, capsys):
    cand = tmp_path / "candidate.txt"
    cand.write_text(worfbench_text(STEPS))
    code = cli.main(["gate", "--golden", str(golden_file), "--candidate", str(cand), "--encoder", "minilm"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "result: PASS (exit 0)" in out and "graph_f1=1.0000 < 0.75? ok" in out


def test_cli_half_the_steps_removed_fails(golden_file, tmp_path, capsys):
    kept = [STEPS[0], STEPS[2], STEPS[4]]  # steps 2, 4, 6 removed
    cand = tmp_path / "candidate.json"
    cand.write_text(json.dumps({"nodes": kept, "edges": [["START", 1], [1, 2], [2, 3], [3, "END"]]}))
    code = cli.main(["gate", "--golden", str(golden_file), "--candidate", str(cand), "--encoder", "minilm", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["exit_code"] == 1 and doc["verdict"] == "FAIL"
    modes = {s["failure_mode"]: s for s in doc["failure_modes"]}
    assert modes["missing"]["verdict"] == "FAIL"
    pair = doc["pairs"][0]
    # 3 of 6 steps aligned in order: chain P = 3/3, R = 3/6 -> F1 = 2/3
    assert pair["metrics"]["chain_f1"] == pytest.approx(2 / 3, abs=1e-12)
    assert pair["metrics"]["n_aligned"] == 3
    assert doc["encoder"] == "sentence-transformers/all-MiniLM-L6-v2"


def test_cli_missing_file_exits_2(golden_file, tmp_path, capsys):
    missing = tmp_path / "no_such_candidate.txt"
    code = cli.main(["gate", "--golden", str(golden_file), "--candidate", str(missing)])
    err = capsys.readouterr().err
    assert code == 2 and "no_such_candidate.txt: file not found" in err


def test_cli_malformed_thresholds_exits_2(golden_file, tmp_path, capsys):
    th = tmp_path / "thresholds.json"
    th.write_text('{"failure_modes": {"missing": {"primary": {"graph_f1": "high"}}}}')
    code = cli.main(["gate", "--golden", str(golden_file), "--candidate", str(golden_file), "--thresholds", str(th)])
    err = capsys.readouterr().err
    assert code == 2 and "thresholds.json" in err and "must be a number" in err
    th.write_text("not json")
    assert (
        cli.main(["gate", "--golden", str(golden_file), "--candidate", str(golden_file), "--thresholds", str(th)]) == 2
    )
    assert "not valid JSON" in capsys.readouterr().err


def test_cli_unparseable_workflow_exits_2(golden_file, tmp_path, capsys):
    cand = tmp_path / "cand.txt"
    cand.write_text("Node:\n1: do something\n")  # no Edge: line
    assert cli.main(["gate", "--golden", str(golden_file), "--candidate", str(cand)]) == 2
    assert "cand.txt: no 'Edge:' line" in capsys.readouterr().err


def test_cli_lone_surrogate_and_bad_utf8_are_one_line_exit_2_and_a_bom_is_read(tmp_path, capsys):
    """A JSON escape of half a UTF-16 pair used to reach the sentence encoder (a traceback); a byte
    that is not UTF-8 is named by line and column; a UTF-8 byte-order mark before JSON is dropped."""
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"nodes": ["open the file", "read it"]}), encoding="utf-8")
    sur = tmp_path / "sur.json"
    sur.write_text('{"nodes": ["open the file", "read\\ud800 it"]}', encoding="utf-8")
    assert cli.main(["gate", "--golden", str(sur), "--candidate", str(ok)]) == 2
    assert capsys.readouterr().err == (
        f"metamorph gate: error: {sur}, field 'nodes': holds a lone surrogate \\ud800 "
        "(at [1]) at character 5 (half of a UTF-16 pair, not a character); write the "
        "character itself\n"
    )
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"Node:\n1: open the file\xff\nEdge: (START,1) (1,END)\n")
    assert cli.main(["gate", "--golden", str(latin), "--candidate", str(ok)]) == 2
    assert capsys.readouterr().err == (
        f"metamorph gate: error: {latin}, row 2: not valid UTF-8: byte 0xff at column 17 (invalid start byte)\n"
    )
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + ok.read_bytes())
    assert [w.nodes for w in gate_cli.read_workflow_file(bom)] == [("open the file", "read it")]


def test_cli_bad_usage_exits_2(capsys):
    assert cli.main(["gate", "--golden", "x"]) == 2
    assert cli.main(["gate", "--golden", "x", "--candidate", "y", "--mode", "all"]) == 2


def test_cli_missing_candidate_id_is_a_failure(tmp_path, capsys):
    g = tmp_path / "golden.jsonl"
    g.write_text("\n".join(json.dumps({"id": k, "nodes": STEPS[:5]}) for k in ("a", "b")) + "\n")
    c = tmp_path / "candidate.jsonl"
    c.write_text(json.dumps({"id": "z", "nodes": STEPS[:5]}) + "\n")
    code = cli.main(["gate", "--golden", str(g), "--candidate", str(c), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["missing_candidates"] == ["a", "b"] and doc["extra_candidates"] == ["z"]


def test_cli_duplicate_ids_exit_2(tmp_path, capsys):
    g = tmp_path / "golden.jsonl"
    g.write_text("\n".join(json.dumps({"id": "a", "nodes": STEPS[:5]}) for _ in range(2)) + "\n")
    assert cli.main(["gate", "--golden", str(g), "--candidate", str(g)]) == 2
    assert "golden.jsonl, row 2, field 'id': duplicate golden id 'a'" in capsys.readouterr().err


def test_read_workflow_file_formats(tmp_path):
    p = tmp_path / "w.json"
    p.write_text(
        json.dumps(
            {
                "id": "w1",
                "nodes": [{"id": 1, "text": "a"}, {"id": 2, "text": "b"}],
                "edges": [["start", 1], [1, 2], [2, "End"]],
            }
        )
    )
    (w,) = gate_cli.read_workflow_file(p)
    assert w.wid == "w1" and w.nodes == ("a", "b") and w.edges == (("START", "1"), ("1", "2"), ("2", "END"))
    p.write_text(json.dumps({"nodes": ["a", "b"]}))  # no edges -> linear chain
    assert gate_cli.read_workflow_file(p)[0].edges == (("START", "1"), ("1", "2"), ("2", "END"))


def test_partial_thresholds_file_keeps_the_other_defaults(tmp_path):
    from metamorph.studies.workflow_perturb.gate import load_thresholds

    p = tmp_path / "t.json"
    p.write_text(json.dumps({"failure_modes": {"missing": {"primary": {"graph_f1": 0.1}}}}))
    t = load_thresholds(p)
    modes = {b.failure_mode: b for b in t.bundles}
    assert set(modes) == {"missing", "compressed", "description"}
    assert dict(modes["missing"].primary) == {"graph_f1": 0.1}
    assert dict(modes["description"].primary) == dict(
        {b.failure_mode: b for b in load_thresholds(None).bundles}["description"].primary
    )


def test_unknown_failure_mode_name_is_rejected(tmp_path):
    from metamorph.studies.workflow_perturb.gate import ThresholdsError, load_thresholds

    p = tmp_path / "t.json"
    p.write_text(json.dumps({"failure_modes": {"missin": {"primary": {"graph_f1": 0.5}}}}))
    with pytest.raises(ThresholdsError, match="unknown failure mode 'missin'"):
        load_thresholds(p)


def test_a_utf8_bom_workflow_file_reads_as_its_format(tmp_path):
    """A leading UTF-8 byte-order mark is dropped before the format is told from the first
    character: JSON, JSONL and WorFBench text with a BOM read the same as without."""
    doc = {"id": "w1", "nodes": STEPS[:5]}
    variants = {"w.json": json.dumps(doc), "w.jsonl": json.dumps(doc) + "\n", "w.txt": worfbench_text(STEPS[:5])}
    for name, text in variants.items():
        plain, bom = tmp_path / name, tmp_path / f"bom_{name}"
        plain.write_text(text, encoding="utf-8")
        bom.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
        [a], [b] = gate_cli.read_workflow_file(plain), gate_cli.read_workflow_file(bom)
        assert (b.wid, b.nodes, b.edges) == (a.wid, a.nodes, a.edges)
        assert b.nodes == tuple(STEPS[:5])


def test_cli_gate_passes_a_utf8_bom_json_file_against_itself(tmp_path, capsys):
    g = tmp_path / "golden.json"
    g.write_bytes(b"\xef\xbb\xbf" + json.dumps({"nodes": STEPS}).encode("utf-8"))
    code = cli.main(["gate", "--golden", str(g), "--candidate", str(g), "--encoder", "minilm"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "result: PASS (exit 0)" in out and "graph_f1=1.0000 < 0.75? ok" in out


def test_cli_gate_an_nfd_candidate_of_an_nfc_golden_passes_in_any_mode(tmp_path, capsys):
    import unicodedata

    steps = ["Order a café au lait", "Pay the café bill", "Leave the café", "Walk home", "Sleep well"]
    g, c = tmp_path / "golden.txt", tmp_path / "candidate.txt"
    g.write_text(worfbench_text(steps), encoding="utf-8")
    c.write_text(unicodedata.normalize("NFD", worfbench_text(steps)), encoding="utf-8")
    assert c.read_bytes() != g.read_bytes()
    code = cli.main(
        ["gate", "--golden", str(g), "--candidate", str(c), "--encoder", "minilm", "--mode", "any", "--json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["verdict"] == "PASS"
    m = doc["pairs"][0]["metrics"]
    assert (m["bleu"], m["gleu"], m["chain_f1"], m["graph_f1"]) == (1.0, 1.0, 1.0, 1.0)


# --------------------------------------------------------------------------- one validation, size bound, exit 3

OK_DOC = {"nodes": STEPS[:5]}
BLANK = [*STEPS[:2], " \t ", *STEPS[3:5]]  # node 3 is only whitespace


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("object.json", json.dumps({"nodes": BLANK}), ", field 'nodes'"),
        ("empty.json", json.dumps({"nodes": [*STEPS[:2], "", *STEPS[3:5]]}), ", field 'nodes'"),
        (
            "node_objects.json",
            json.dumps({"nodes": [{"id": k, "text": t} for k, t in enumerate(BLANK, start=1)]}),
            ", field 'nodes'",
        ),
        ("gold.json", json.dumps({"gold_nodes": BLANK}), ", field 'gold_nodes'"),
        (
            "lines.jsonl",
            json.dumps({"id": "a", **OK_DOC}) + "\n" + json.dumps({"id": "b", "nodes": BLANK}),
            ", row 2, field 'nodes'",
        ),
        ("array.json", json.dumps([{"id": "a", **OK_DOC}, {"id": "b", "nodes": BLANK}]), ", row 2, field 'nodes'"),
        ("text_field.json", json.dumps({"workflow": worfbench_text(BLANK)}), ", field 'workflow'"),
        ("worfbench.txt", worfbench_text(BLANK), ""),
    ],
)
@pytest.mark.parametrize("role", ["golden", "candidate"])
def test_an_empty_or_blank_step_is_one_line_exit_2_in_every_format(name, text, where, role, tmp_path, capsys):
    """A blank step of a JSON workflow reached BERTScore (a traceback, exit 1 — "regression");
    the same step in WorFBench text was one line, exit 2. Every format now passes one check."""
    bad, ok = tmp_path / name, tmp_path / "ok.json"
    bad.write_text(text, encoding="utf-8")
    ok.write_text(json.dumps(OK_DOC), encoding="utf-8")
    files = {"golden": ok, "candidate": ok, role: bad}
    code = cli.main(["gate", "--golden", str(files["golden"]), "--candidate", str(files["candidate"])])
    assert (code, capsys.readouterr().err) == (
        2,
        f"metamorph gate: error: {bad}{where}: node 3 has an empty description\n",
    )


def test_json_nested_5000_levels_is_one_line_exit_2(tmp_path, capsys):
    """A RecursionError traceback (exit 1) before; the shared JSON reader now names the file."""
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(OK_DOC), encoding="utf-8")
    for name, text in (("deep.json", "[" * 5000 + "]" * 5000), ("deep_obj.json", '{"a":' * 5000 + "1" + "}" * 5000)):
        deep = tmp_path / name
        deep.write_text(text, encoding="utf-8")
        assert cli.main(["gate", "--golden", str(deep), "--candidate", str(ok)]) == 2
        assert capsys.readouterr().err == (
            f"metamorph gate: error: {deep}: not valid JSON: arrays or objects nested too deeply "
            "(more than about 1,000 levels)\n"
        )
    lines = tmp_path / "deep.jsonl"
    lines.write_text(
        json.dumps({"id": "a", **OK_DOC}) + "\n" + '{"id": "b", "nodes": ' + "[" * 5000 + "]" * 5000 + "}\n"
    )
    assert cli.main(["gate", "--golden", str(lines), "--candidate", str(lines)]) == 2
    assert capsys.readouterr().err == (
        f"metamorph gate: error: {lines}, row 2: neither one JSON document nor JSONL: line 2 is not valid JSON "
        "(arrays or objects nested too deeply (more than about 1,000 levels))\n"
    )


def test_the_step_bound_is_200_steps_in_every_format_and_checked_when_the_file_is_read(tmp_path, capsys):
    """1,000 steps took 14 s and 745 MB, 10,000 more than 400 s and 4.3 GB: the bound is checked as
    the file is read, so the second file is not even opened and no encoder is loaded."""
    assert (gate.MAX_GATE_STEPS, gate.MAX_GATE_EDGES) == (200, 20_300)  # 200·199/2 + 2·200
    steps = [f"step number {k}" for k in range(1, 202)]
    most, over = tmp_path / "most.json", tmp_path / "over.json"
    most.write_text(json.dumps({"nodes": steps[:200]}), encoding="utf-8")
    over.write_text(json.dumps({"nodes": steps}), encoding="utf-8")
    assert len(gate_cli.read_workflow_file(most)[0].nodes) == 200
    text = tmp_path / "over.txt"
    text.write_text(worfbench_text(steps), encoding="utf-8")
    lines = tmp_path / "over.jsonl"
    lines.write_text(json.dumps({"id": "a", **OK_DOC}) + "\n" + json.dumps({"id": "b", "nodes": steps}) + "\n")
    never_read = tmp_path / "does_not_exist.json"
    for path, where in ((over, ", field 'nodes'"), (text, ""), (lines, ", row 2, field 'nodes'")):
        assert cli.main(["gate", "--golden", str(path), "--candidate", str(never_read)]) == 2
        assert capsys.readouterr().err == (
            f"metamorph gate: error: {path}{where}: has 201 steps; the gate scores at most 200 per workflow "
            "(its metrics grow with the square of the steps)\n"
        )


def test_the_edge_bound_is_one_line_exit_2(tmp_path, capsys):
    many = tmp_path / "edges.json"
    many.write_text(json.dumps({"nodes": STEPS[:5], "edges": [["START", 1]] * 20_301}), encoding="utf-8")
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(OK_DOC), encoding="utf-8")
    assert cli.main(["gate", "--golden", str(ok), "--candidate", str(many)]) == 2
    assert capsys.readouterr().err == (
        f"metamorph gate: error: {many}, field 'edges': has 20,301 edges; the gate scores at most 20,300 per "
        "workflow (a DAG on 200 steps has no more without repeating one)\n"
    )


def test_an_unexpected_failure_exits_3_never_1(tmp_path, capsys, monkeypatch):
    """Exit 1 is what CI reads as a regression: a failure of the gate itself (here the assignment
    solver of the alignment raising) is exit 3 with one last line saying so, and --json says ERROR."""
    import scipy.optimize

    def broken(*args, **kwargs):
        raise RuntimeError("solver exploded")

    monkeypatch.setattr(scipy.optimize, "linear_sum_assignment", broken)
    g = tmp_path / "golden.json"
    g.write_text(json.dumps({"nodes": STEPS}), encoding="utf-8")
    assert gate.EXIT_INTERNAL == 3
    assert cli.main(["gate", "--golden", str(g), "--candidate", str(g), "--encoder", "minilm", "--json"]) == 3
    out, err = capsys.readouterr()
    assert json.loads(out) == {"verdict": "ERROR", "exit_code": 3, "error": "RuntimeError: solver exploded"}
    assert err.splitlines()[0] == "Traceback (most recent call last):"
    assert err.splitlines()[-1] == (
        "metamorph gate: internal error: RuntimeError: solver exploded (the gate failed and reached no verdict; "
        "this is not a regression of the candidate) — exit 3"
    )


@pytest.mark.parametrize(
    "name, text, where",
    [
        (
            "object.json",
            json.dumps({"nodes": STEPS[:2], "edges": [["START", 1], [1, 7], [2, "END"]]}),
            ", field 'edges'",
        ),
        ("worfbench.txt", "Node:\n1: Open the project repository\nEdge: (START,1) (1,7) (1,END)\n", ""),
    ],
)
def test_an_edge_naming_a_node_that_does_not_exist_is_one_line_exit_2(name, text, where, tmp_path, capsys):
    """An edge into node 7 of a 2-step workflow was scored (graph F1 0, a FAIL: exit 1, "regression")."""
    bad, ok = tmp_path / name, tmp_path / "ok.json"
    bad.write_text(text, encoding="utf-8")
    ok.write_text(json.dumps(OK_DOC), encoding="utf-8")
    code = cli.main(["gate", "--golden", str(ok), "--candidate", str(bad)])
    n = 2 if name.endswith(".json") else 1
    assert (code, capsys.readouterr().err) == (
        2,
        f"metamorph gate: error: {bad}{where}: edge (1,7) names node '7', which does not exist (nodes are 1..{n})\n",
    )


CYCLE_EDGES = [["START", 1], [1, 2], [2, 3], [3, 4], [4, 2], [4, 5], [5, "END"]]  # 2 -> 3 -> 4 -> 2
CYCLE_TEXT = worfbench_text(STEPS[:5]).replace("(4,5)", "(4,2) (4,5)")


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("object.json", json.dumps({"id": "w-b", "nodes": STEPS[:5], "edges": CYCLE_EDGES}), ", field 'edges'"),
        ("no_id.json", json.dumps({"nodes": STEPS[:5], "edges": CYCLE_EDGES}), ", field 'edges'"),
        (
            "gold.json",
            json.dumps({"id": "w-b", "gold_nodes": STEPS[:5], "gold_edges": CYCLE_EDGES}),
            ", field 'gold_edges'",
        ),
        (
            "lines.jsonl",
            json.dumps({"id": "w-a", **OK_DOC})
            + "\n"
            + json.dumps({"id": "w-b", "nodes": STEPS[:5], "edges": CYCLE_EDGES}),
            ", row 2, field 'edges'",
        ),
        (
            "array.json",
            json.dumps([{"id": "w-a", **OK_DOC}, {"id": "w-b", "nodes": STEPS[:5], "edges": CYCLE_EDGES}]),
            ", row 2, field 'edges'",
        ),
        ("text_field.json", json.dumps({"id": "w-b", "workflow": CYCLE_TEXT}), ", field 'workflow'"),
        ("worfbench.txt", CYCLE_TEXT, ", field 'edges'"),
    ],
)
@pytest.mark.parametrize("role", ["golden", "candidate"])
def test_a_cycle_in_the_edges_is_one_line_exit_2_in_every_format(name, text, where, role, tmp_path, capsys):
    """A candidate whose edges make a cycle was scored (a PASS, exit 0); every format, either side,
    is now refused when its file is read: one line naming the file, row, field and workflow, exit 2,
    no verdict (the --json document is the ERROR one)."""
    bad, ok = tmp_path / name, tmp_path / "ok"
    bad.write_text(text, encoding="utf-8")
    many = name.endswith(("jsonl", "array.json"))
    ok.write_text(
        "\n".join(json.dumps({"id": k, **OK_DOC}) for k in ("w-a", "w-b")) if many else json.dumps(OK_DOC),
        encoding="utf-8",
    )
    files = {"golden": ok, "candidate": ok, role: bad}
    label = f"{role} workflow: " if name in ("no_id.json", "worfbench.txt") else f"{role} workflow 'w-b': "
    message = f"{bad}{where}: {label}edges form a cycle: 2 -> 3 -> 4 -> 2"
    argv = ["gate", "--golden", str(files["golden"]), "--candidate", str(files["candidate"])]
    assert cli.main(argv) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", f"metamorph gate: error: {message}\n")
    assert cli.main([*argv, "--json"]) == 2
    out = capsys.readouterr()
    assert json.loads(out.out) == {"verdict": "ERROR", "exit_code": 2, "error": message}


def test_a_self_loop_is_a_cycle(tmp_path, capsys):
    bad, ok = tmp_path / "loop.json", tmp_path / "ok.json"
    bad.write_text(json.dumps({"nodes": STEPS[:5], "edges": [*CYCLE_EDGES[:4], [3, 3], [4, 5], [5, "END"]]}))
    ok.write_text(json.dumps(OK_DOC))
    assert cli.main(["gate", "--golden", str(ok), "--candidate", str(bad)]) == 2
    assert (
        capsys.readouterr().err
        == f"metamorph gate: error: {bad}, field 'edges': candidate workflow: edges form a cycle: 3 -> 3\n"
    )
