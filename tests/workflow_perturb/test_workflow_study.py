"""WorkflowPerturb glue: golden rows, deterministic variants, scoring, judge averaging, end to end."""

import json

import dagster as dg
import duckdb
import pytest

from metamorph.embeddings import load_encoder
from metamorph.providers.base import GenerationResult
from metamorph.schemas import validate_frame
from metamorph.studies.workflow_perturb import schemas as S
from metamorph.studies.workflow_perturb.plan import (
    deterministic_perturbations,
    golden_rows,
    judge_requests,
    judge_row,
    score_perturbations,
    workflow_from_record,
)
from metamorph.studies.workflow_perturb.workflows import Workflow, load_goldens
from pipelines.definitions import build_definitions
from tests.conftest import shared_sample

CHAIN = Workflow(
    "w1",
    "make tea",
    ("Boil water", "Put a tea bag in a mug", "Pour the water into the mug", "Wait three minutes", "Remove the tea bag"),
    (("START", "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", "5"), ("5", "END")),
    "test",
)


def test_golden_rows_round_trip_and_keep_rejections(tmp_path):
    rows = golden_rows([CHAIN], [], "embedded")
    assert rows[0]["valid"] and rows[0]["stratum"] == "5-7" and rows[0]["n_nodes"] == 5
    import pandas as pd

    back = workflow_from_record(next(pd.DataFrame(rows).itertuples()))
    assert back.nodes == CHAIN.nodes and back.edges == CHAIN.edges
    bad = tmp_path / "g.jsonl"
    bad.write_text(
        json.dumps(
            {
                "id": "tiny",
                "task": "t",
                "gold_nodes": [{"id": "1", "text": "a"}],
                "gold_edges": [["START", "1"], ["1", "END"]],
            }
        )
        + "\n"
    )
    valid, rejected = load_goldens(str(bad), on_invalid="collect")
    rows = golden_rows(valid, rejected, str(bad))
    assert [(r["golden_id"], r["valid"]) for r in rows] == [("tiny", False)]
    assert "5" in rows[0]["rejection_reason"]


def test_deterministic_variants_and_exact_scores_of_identity_like_cases():
    perts = deterministic_perturbations([CHAIN], severities=[0.1])
    assert [(p.type, p.n_altered) for p in perts] == [("missing", 1), ("compressed", 1), ("description", 1)]
    import pandas as pd

    variants = pd.DataFrame([p.to_row() for p in perts])
    scores = score_perturbations({"w1": CHAIN}, variants, load_encoder(prefer="minilm")).set_index("variant_id")
    missing = scores.loc[perts[0].variant_id]
    # one of five chain steps removed: every kept step aligns in order -> Chain F1 = 2·(4/4·4/5)/(4/4+4/5) = 8/9
    assert missing["chain_f1"] == pytest.approx(8 / 9)
    # the removed step k (1-based) is ranked after the 4 kept ones: 5 - k discordant pairs of 10
    (k,) = (int(i) for i in perts[0].altered_node_ids)
    assert missing["kendall_tau"] == pytest.approx(1 - 2 * (5 - k) / 10)
    desc = scores.loc[perts[2].variant_id]
    assert desc["bleu"] < 1.0


def test_judge_row_excludes_invalid_replies():
    row = judge_row(
        [
            GenerationResult('{"final_score": 4}', "stop"),
            GenerationResult('{"final_score": 5}', "length"),
            GenerationResult(None, error="ProviderError[500]: x"),
            GenerationResult("Score: 5", "stop"),
        ]
    )
    assert row["judge"] == pytest.approx(4 / 5) and (row["judge_valid"], row["judge_invalid"]) == (1, 2)
    assert (row["n_call_errors"], row["not_measurable"]) == (1, None)  # the failed call is no invalid reply
    assert json.loads(row["judge_reasons"]) == ["ok", "truncated", "call_error", "not_json"]
    none = judge_row([GenerationResult("no idea", "stop")])
    assert none["judge"] is None and none["not_measurable"] == "not measurable: no reply parsed (1 of 1 unparseable)"


def test_judge_row_of_failed_calls_is_not_measurable_not_invalid():
    failed = [GenerationResult(None, error="ProviderError: OpenAI returned no choices")] * 3
    row = judge_row(failed)
    assert (row["judge"], row["judge_valid"], row["judge_invalid"], row["n_call_errors"]) == (None, 0, 0, 3)
    assert row["not_measurable"] == "not measurable: every call failed (3 of 3)"
    mixed = judge_row([*failed[:2], GenerationResult("Score: 5", "stop")])
    assert (mixed["judge"], mixed["judge_invalid"], mixed["n_call_errors"]) == (None, 1, 2)
    assert mixed["not_measurable"] == "not measurable: no reply parsed (1 of 1 unparseable)"


def test_judge_requests_send_the_dag_edges():
    dag = Workflow(
        "d", "a task", ("a", "b", "c"), (("START", "1"), ("START", "2"), ("1", "3"), ("2", "3"), ("3", "END"))
    )
    reqs = judge_requests(dag, dag, "stub", "m", {"temperature": 0.0})
    assert len(reqs) == 3 and [r.repeat_index for r in reqs] == [1, 2, 3]
    user = reqs[0].messages[1]["content"]
    assert user.count("Edges: (START, 1) (START, 2) (1, 3) (2, 3) (3, END)") == 2


def test_constrained_judge_requests_carry_the_b64_schema():
    from metamorph.studies.workflow_perturb.judge import JUDGE_REPLY_SCHEMA, JUDGE_SYSTEM_B6, parse_judge_json

    w = Workflow("w", "a task", ("a", "b"), (("START", "1"), ("1", "2"), ("2", "END")))
    free = judge_requests(w, w, "stub", "m", {"temperature": 0.0})
    reqs = judge_requests(w, w, "stub", "m", {"temperature": 0.0}, constrained=True)
    assert reqs[0].params == {
        "temperature": 0.0,
        "response_format": {"type": "json_object", "schema": JUDGE_REPLY_SCHEMA},
    }
    assert "response_format" not in free[0].params
    assert reqs[0].messages == free[0].messages
    # every field the B.6 prompt asks for is required by the schema, and a conforming reply parses
    for field in JUDGE_REPLY_SCHEMA["required"]:
        assert f'"{field}"' in JUDGE_SYSTEM_B6
    reply = (
        '{"missing_steps": ["b"], "extra_steps": [], "reordered_steps": [], "initial_score": 4, '
        '"self_check": "one minor step is missing", "final_score": 4}'
    )
    assert parse_judge_json(reply, "stop") == (4, "ok")
    # the grammar the local engine decodes with (what xllamacpp does with response_format)
    from metamorph.providers.llama_cpp import compact_json_grammar

    grammar = compact_json_grammar({"type": "json_object", "schema": JUDGE_REPLY_SCHEMA})
    assert grammar.startswith("%llguidance {}\nstart: %json ")
    assert json.loads(grammar.split("%json ", 1)[1])["required"][-1] == "final_score"


@pytest.mark.llm
def test_workflow_study_end_to_end(metamorph_home):
    worf = shared_sample("worfbench")
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["smollm2"])
        r1 = defs.resolve_job_def("workflow_perturb_inputs_job").execute_in_process(
            instance=instance,
            run_config={
                "ops": {"workflow_perturb__goldens": {"config": {"sources": ["embedded", str(worf)], "limit": 4}}}
            },
        )
        assert r1.success
        r2 = defs.resolve_job_def("workflow_perturb_model_job").execute_in_process(
            instance=instance,
            partition_key="smollm2",
            run_config={
                "ops": {
                    "workflow_perturb__perturbations_llm": {
                        "config": {"n_goldens": 1, "types": ["missing"], "max_attempts": 1, "max_tokens": 64}
                    },
                    "workflow_perturb__judge_scores": {"config": {"n_variants": 1, "max_tokens": 24}},
                }
            },
        )
        assert r2.success
        assert defs.resolve_job_def("workflow_perturb_tables_job").execute_in_process(instance=instance).success
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    try:

        def read(t):
            return con.execute(f"SELECT * FROM workflow_perturb.{t}").df()

        goldens = validate_frame(S.Goldens, read("goldens"), "goldens")
        assert len(goldens) == 4 + 4  # 4 embedded (limit applies per source) + 4 WorFBench
        perts = validate_frame(S.Perturbations, read("perturbations"), "perturbations")
        assert len(perts) == goldens["valid"].sum() * 9
        scores = validate_frame(S.PerturbationScores, read("perturbation_scores"), "perturbation_scores")
        assert len(scores) == len(perts) and scores["chain_f1"].notna().all()
        llm = validate_frame(S.Perturbations, read("perturbations_llm"), "perturbations_llm")
        assert len(llm) == 1 and llm["operator"].iloc[0] == "llm" and llm["attempts"].iloc[0] >= 1
        judge = validate_frame(S.JudgeScores, read("judge_scores"), "judge_scores")
        assert len(judge) == 1 and judge["judge_valid"].iloc[0] + judge["judge_invalid"].iloc[0] == 3
    finally:
        con.close()


def test_chain_f1_sensitivity_under_missing_steps_matches_the_paper_on_the_shared_sample():
    # §5.1: structural Δ_avg = 0.72 under Missing Steps (Graph/Chain F1 0.90 -> 0.76 -> 0.61);
    # here: deterministic contiguous deletions of ceil(p·n) steps of the 300 WorFBench goldens, MiniLM
    import pandas as pd

    goldens, rejected = load_goldens(str(shared_sample("worfbench")), on_invalid="collect")
    assert len(goldens) == 300 and not rejected
    perts = deterministic_perturbations(goldens, types=["missing"])
    assert len(perts) == 900 and all(p.status == "valid" for p in perts)
    variants = pd.DataFrame([p.to_row() for p in perts])
    scores = score_perturbations(
        {w.workflow_id: w for w in goldens}, variants, load_encoder(prefer="minilm"), bertscore=False
    )
    assert len(scores) == 900 and scores["chain_f1"].notna().all()
    mean = scores.assign(p=variants["p"].to_numpy()).groupby("p")["chain_f1"].mean()
    delta = 2.5 * (mean[0.1] - mean[0.5])
    assert abs(delta - 0.72) <= 0.05
    assert [round(mean[p], 3) for p in (0.1, 0.3, 0.5)] == [0.909, 0.761, 0.608]


def test_judge_spread_is_the_call_to_call_range_and_not_measurable_for_one_computation():
    replies = [
        GenerationResult('{"final_score": 4}', "stop"),
        GenerationResult('{"final_score": 2}', "stop"),
        GenerationResult("no idea", "stop"),
    ]
    row = judge_row(replies, ["k1", "k2", "k3"])
    assert row["judge_spread"] == (4 - 2) / 5 and row["judge_spread_note"] is None
    same = [GenerationResult('{"final_score": 4}', "stop")] * 3
    row = judge_row(same, ["k1", "k1", "k1"])  # a deterministic judge: the three calls are one generation
    assert row["judge"] == 4 / 5 and row["judge_spread"] is None
    assert (
        row["judge_spread_note"]
        == "not measurable: deterministic decoding (the judge's calls are one shared computation)"
    )
    assert judge_row(same[:1], ["k1"])["judge_spread"] is None  # one valid reply: no spread
