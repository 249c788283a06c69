"""``python -m pipelines.run`` on bad input: one line on stderr naming file and row, exit 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_bad_jsonl_line_gives_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q"}\n{bad json\n', encoding="utf-8")
    env = {**os.environ, "METAMORPH_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh")}
    out = subprocess.run([sys.executable, "-m", "pipelines.run", "format_robustness", "--source", f"medqa:{bad}",
                          "--no-models"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"error: {bad}, row 2: not valid JSON "
                                               "(Expecting property name enclosed in double quotes)"]
    assert not (tmp_path / "home" / "metamorph.duckdb").exists()  # validated before any run was launched


#: Malformed CSV sources of the format study: (file name, source kind, text, stderr after "error: <path>").
BAD_CSV_CLI = [
    ("bad_cell.csv", "canonical", 'instance_id,dataset,fields,task_prompt,answer_space,gold\n'
     'r1,toy,age=61,Decide.,"[""yes"", ""no""]",yes\n',
     ", row 1, field 'fields': expected JSON text (a CSV cell holds a list or an object as JSON), "
     "got 'age=61' (Expecting value)"),
    ("no_column.csv", "canonical", 'instance_id,dataset,fields,task_prompt,gold\nr1,toy,"{""a"": 1}",Decide.,yes\n',
     ", row 1, field 'answer_space': missing or empty"),
    ("ragged.csv", "canonical", 'instance_id,dataset,fields,task_prompt,answer_space,gold\n'
     'r1,toy,"{""a"": 1}",Decide.,"[""yes"", ""no""]",yes,extra\n',
     ", row 1: ragged row: 7 values, the header has 6 columns (line 2)"),
    ("empty.csv", "canonical", "", ": file is empty"),
    ("not_numeric.csv", "credit_default",
     "id,ID,LIMIT_BAL,SEX,EDUCATION,MARRIAGE,AGE,PAY_0,PAY_2,PAY_3,PAY_4,PAY_5,PAY_6,"
     "BILL_AMT1,BILL_AMT2,BILL_AMT3,BILL_AMT4,BILL_AMT5,BILL_AMT6,PAY_AMT1,PAY_AMT2,PAY_AMT3,PAY_AMT4,PAY_AMT5,"
     "PAY_AMT6,default_payment_next_month\nc-1,1,1000,2,1,2,thirty," + ",".join(["0"] * 18) + ",1\n",
     ", row 1, field 'AGE': expected an integer, got 'thirty'"),
]


@pytest.mark.parametrize(("name", "kind", "text", "message"), BAD_CSV_CLI, ids=[c[0] for c in BAD_CSV_CLI])
def test_malformed_csv_source_gives_one_line_and_exit_2(tmp_path, name, kind, text, message):
    bad = tmp_path / name
    bad.write_text(text, encoding="utf-8")
    env = {**os.environ, "METAMORPH_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh")}
    out = subprocess.run([sys.executable, "-m", "pipelines.run", "format_robustness", "--source", f"{kind}:{bad}",
                          "--no-models"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"error: {bad}{message}"]
    assert not (tmp_path / "home" / "metamorph.duckdb").exists()


def test_model_job_ops_pass_only_the_options_given():
    from pipelines.run import build_parser, model_job_ops

    ops = model_job_ops(build_parser().parse_args(["workflow_perturb", "--llm-goldens", "1", "--judge-variants", "45"]))
    assert ops == {"workflow_perturb__llm_perturbations": {"config": {"n_goldens": 1}},
                   "workflow_perturb__judge_scores": {"config": {"n_variants": 45}}}
    assert model_job_ops(build_parser().parse_args(["workflow_perturb"])) == {
        "workflow_perturb__llm_perturbations": {"config": {}}}
    assert model_job_ops(build_parser().parse_args(["workflow_perturb", "--judge-constrained"]))[
        "workflow_perturb__judge_scores"] == {"config": {"constrained": True}}
    assert model_job_ops(build_parser().parse_args(["format_robustness", "--k", "2"])) == {
        "format_robustness__workflow_generations": {"config": {"k": 2}}}
    with pytest.raises(SystemExit):  # 0 judge variants is refused, not read as the default
        build_parser().parse_args(["workflow_perturb", "--judge-variants", "0"])
