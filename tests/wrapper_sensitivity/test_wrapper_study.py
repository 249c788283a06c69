"""Wrapper study: request planning, three-mode scoring, token balance, budget check, end to end."""

import json

import dagster as dg
import duckdb
import pandas as pd
import pytest

from metamorph.errors import ContextBudgetError
from metamorph.models import ModelSpec
from metamorph.studies.wrapper_sensitivity.tasks import synthetic_tasks
from metamorph.schemas import validate_frame
from metamorph.studies.wrapper_sensitivity import schemas as M
from metamorph.studies.wrapper_sensitivity import schemas as S
from metamorph.studies.wrapper_sensitivity.plan import (
    CONSTRAINED,
    count_and_check_budget,
    plan_wrapper_generations,
    score_generations,
    token_balance,
)
from metamorph.studies.wrapper_sensitivity.wrappers import FAMILIES, render_token_controlled
from pipelines.definitions import build_definitions
from tests.conftest import shared_sample

LOCAL = ModelSpec(id="local", provider="llama_cpp", model="m.gguf", params={"response_format": {"type": "json_object"}})
TASKS = ["boolq", "arc_challenge", "gsm8k", "commonsense_qa", "winogrande", "hellaswag", "piqa"]


def test_plan_counts_seeds_and_the_constrained_arm():
    items = synthetic_tasks(1, seed=0)
    prompts = render_token_controlled(items, FAMILIES)
    planned = plan_wrapper_generations(items, prompts, LOCAL, seeds=[0, 1], constrained_arm=True)
    assert len(planned) == 3 * 5 * 2 + 3 * 2  # + json_constrained per item and seed
    keys = {p.request.cache_key() for p in planned}
    assert len(keys) == len(planned)
    plain = [p for p in planned if p.wrapper == "plain"][0]
    assert plain.request.params == {"temperature": 0.7, "max_tokens": 24, "seed": 0}  # registry response_format dropped
    arm = [p for p in planned if p.wrapper == CONSTRAINED][0]
    assert arm.request.params["response_format"]["type"] == "json_object"
    assert (
        arm.request.messages
        == [p for p in planned if p.wrapper == "json" and p.item_id == arm.item_id][0].request.messages
    )
    with pytest.raises(ValueError, match="seed"):
        plan_wrapper_generations(items, prompts, LOCAL, seeds=[])


def gen_rows(item, rows):
    return pd.DataFrame(
        [
            {
                "model_id": "m",
                "task": item.task,
                "item_id": item.item_id,
                "wrapper": w,
                "seed": 0,
                "generation_key": f"k{i}",
                "response_text": t,
                "finish_reason": f,
                "prompt_tokens": n,
                "error": e,
            }
            for i, (w, t, f, n, e) in enumerate(rows)
        ]
    )


def test_scoring_in_four_modes_is_exact():
    item = [x for x in synthetic_tasks(1, seed=0) if x.answer_type == "choice"][0]
    wrong = next(lbl for lbl in item.labels if lbl != item.gold)
    gens = gen_rows(
        item,
        [
            ("json", json.dumps({"answer": item.gold}), "stop", 100, None),
            ("structured", f"**Answer:** {item.gold}", "stop", 101, None),
            ("deliberate", f"Let me think. The answer is {wrong}.", "stop", 102, None),
            ("plain", item.gold, "length", 100, None),
            ("structured_delim", None, None, 100, "ProviderError[500]: boom"),
        ],
    )
    scored = score_generations(gens, [item])
    assert len(scored) == 5 * 4 and scored["mode"].tolist()[:4] == ["paper", "strict", "normalized", "lenient"]
    out = scored.set_index(["wrapper", "mode"])
    validate_frame(S.ScoredAnswers, out.reset_index(), "scored_answers")
    assert out.loc[("json", "strict"), "correct"] and out.loc[("json", "strict"), "reason"] == "ok"
    assert not out.loc[("structured", "strict"), "parseable"]
    assert out.loc[("structured", "normalized"), "correct"]
    assert not out.loc[("deliberate", "normalized"), "parseable"]
    assert out.loc[("deliberate", "lenient"), "value"] == wrong and not out.loc[("deliberate", "lenient"), "correct"]
    assert out.loc[("plain", "lenient"), "reason"] == "truncated"
    assert out.loc[("structured_delim", "strict"), "reason"] == "call_error"
    assert out.loc[("json", "normalized"), "n_choices"] == len(item.choices)
    # the paper's extractor: the JSON slot as normalized; no "Final answer:" line in deliberate -> unparseable;
    # a plain reply cut right after the label is not visibly complete -> truncated
    assert out.loc[("json", "paper"), "correct"] and out.loc[("json", "paper"), "reason"] == "ok"
    assert out.loc[("structured", "paper"), "reason"] == "normalized_slot"
    assert out.loc[("deliberate", "paper"), "reason"] == "no_answer"
    assert out.loc[("plain", "paper"), "reason"] == "truncated"
    assert out.loc[("structured_delim", "paper"), "reason"] == "call_error"


def test_token_balance_exact():
    item = synthetic_tasks(1, seed=0)[0]
    gens = gen_rows(
        item,
        [
            ("plain", "x", "stop", 100, None),
            ("json", "x", "stop", 105, None),
            ("structured", "x", "stop", 95, None),
            (CONSTRAINED, "x", "stop", 500, None),
        ],
    )
    row = token_balance(gens).iloc[0]
    assert row["delta_tok"] == pytest.approx(10 / 100) and not row["matched"]  # (105-95)/mean(100,105,95)
    assert json.loads(row["tokens_json"]) == {"json": 105, "plain": 100, "structured": 95}
    gens2 = gen_rows(item, [("plain", "x", "stop", 100, None), ("json", "x", "stop", 105, None)])
    row2 = token_balance(gens2).iloc[0]
    assert row2["delta_tok"] == pytest.approx(5 / 102.5) and row2["matched"]


def test_budget_is_checked_for_every_prompt_before_any_call():
    items = synthetic_tasks(1, seed=0)
    prompts = render_token_controlled(items, FAMILIES)
    lengths = {(p.task, p.item_id, p.family): len(p.messages[-1]["content"]) for p in prompts}
    longest = max(lengths.values())
    counts = count_and_check_budget(prompts, lambda m: len(m[-1]["content"]), max_tokens=24, n_ctx=longest + 24)
    assert counts == lengths
    with pytest.raises(ContextBudgetError, match=r"exceeds n_ctx=.* by 1"):
        count_and_check_budget(prompts, lambda m: len(m[-1]["content"]), max_tokens=24, n_ctx=longest + 23)


@pytest.mark.llm
def test_seven_real_tasks_end_to_end_with_the_local_model(metamorph_home):
    sources = [f"{t}:{shared_sample(t)}" for t in TASKS]
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["smollm2"])
        r1 = defs.resolve_job_def("wrapper_sensitivity_inputs_job").execute_in_process(
            instance=instance,
            run_config={"ops": {"wrapper_sensitivity__qa_items": {"config": {"sources": sources, "limit": 1}}}},
        )
        r2 = defs.resolve_job_def("wrapper_sensitivity_model_job").execute_in_process(
            instance=instance,
            partition_key="smollm2",
            run_config={
                "ops": {"wrapper_sensitivity__wrapper_generations": {"config": {"seeds": [0], "constrained_arm": True}}}
            },
        )
        assert r1.success and r2.success
        assert defs.resolve_job_def("wrapper_sensitivity_tables_job").execute_in_process(instance=instance).success
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    try:

        def read(t):
            return con.execute(f"SELECT * FROM wrapper_sensitivity.{t}").df()

        assert len(read("qa_items")) == 7
        assert len(read("wrapper_generations")) == 7 * 6  # 5 wrappers + the constrained arm
        assert len(read("scored_answers")) == 7 * 6 * 4  # paper, strict, normalized, lenient
        fsi = validate_frame(M.WrapperFSI, read("fsi_psi"), "fsi_psi")
        assert sorted(fsi["task"]) == sorted(TASKS)
        for t, schema in [
            ("wrapper_cells", M.WrapperCells),
            ("mean_fsi_psi", M.WrapperMeanIndices),
            ("fsi_decomposition", M.WrapperDecomposition),
            ("token_balance", S.TokenBalance),
            ("constrained_falsifier", M.WrapperConstrainedFalsifier),
        ]:
            df = read(t)
            assert len(df) > 0, t
            validate_frame(schema, df, t)
        dec = read("fsi_decomposition")
        split = dec.dropna(subset=["compliance_pp"])  # null parts: a wrapper with nothing parseable (see note)
        assert ((split["compliance_pp"] + split["conditional_pp"] - split["fsi_pp"]).abs() < 1e-9).all()
        assert dec.loc[dec["compliance_pp"].isna() & dec["fsi_pp"].notna(), "note"].str.contains("undefined").all()
        assert sorted(read("scored_answers")["mode"].unique()) == ["lenient", "normalized", "paper", "strict"]
    finally:
        con.close()


def test_headline_from_scored_replies_paper_vs_normalized():
    # Two choice items; plain replies "<gold>. <reason>" (the paper's first letter reads them, the
    # normalized whole-value contract does not); json: one compliant object, one prose reply.
    from metamorph.studies.wrapper_sensitivity import metrics as wm

    items = [x for x in synthetic_tasks(2, seed=0) if x.answer_type == "choice"]
    assert len(items) == 2
    rows = []
    for k, x in enumerate(items):
        rows += [
            ("plain", f"{x.gold}. It is the only option that fits.", x),
            ("json", json.dumps({"answer": x.gold}) if k == 0 else f"The answer is {x.gold}.", x),
        ]
    gens = pd.DataFrame(
        [
            {
                "model_id": "m",
                "task": x.task,
                "item_id": x.item_id,
                "wrapper": w,
                "seed": 0,
                "generation_key": f"k{i}",
                "response_text": t,
                "finish_reason": "stop",
                "prompt_tokens": 100,
                "error": None,
            }
            for i, (w, t, x) in enumerate(rows)
        ]
    )
    scored = score_generations(gens, items)
    paper = wm.fsi_psi(wm.cell_metrics(scored)).iloc[0]  # default mode: paper
    # paper: plain A = P = 2/2 = 1; json A = P = 1/2 -> FSI = 0.5, PSI = 0.5, best plain
    assert (paper["fsi"], paper["psi"], paper["best_wrapper"], paper["worst_wrapper"]) == (0.5, 0.5, "plain", "json")
    norm = wm.fsi_psi(wm.cell_metrics(scored, "normalized")).iloc[0]
    # normalized: plain A = P = 0/2 (a label followed by prose is no whole value); json 1/2 -> best json
    assert (norm["fsi"], norm["psi"], norm["best_wrapper"], norm["worst_wrapper"]) == (0.5, 0.5, "json", "plain")
