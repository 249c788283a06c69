"""``metamorph run format_robustness --sequential`` against the local HTTP stub: a candidate that
regresses stops early, the calls saved are printed and the verdict says the run was sequential."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from metamorph.study import get
from pipelines.sequential import SequentialError, check_prefixes, looks, sequential_parties
from tests.core.stub_http import Reply, StubServer, chat_completion

REPO = Path(__file__).resolve().parents[2]


def test_looks_grow_by_the_batch_to_the_plan():
    assert looks(60, 10) == [10, 20, 30, 40, 50, 60]
    assert looks(25, 10) == [10, 20, 25]
    assert looks(5, 10) == [5]
    with pytest.raises(ValueError):
        looks(0, 10)


def test_sources_must_keep_the_earlier_items():
    study = get("format_robustness")
    # construct: record i does not depend on how many are generated
    assert check_prefixes(study, study.values(limit=30, sequential=True, batch=10)) == 30
    with pytest.raises(SequentialError, match="needs --limit N"):
        check_prefixes(study, study.values(sequential=True))


def test_the_verdict_names_a_sequential_run_only_while_its_items_are_compared():
    from metamorph.verdict import sequential_line, sequential_summary
    from pipelines.sequential import RUN_COLUMNS

    row = dict(
        study="format_robustness",
        candidate_id="cand",
        baseline_id="base",
        metric="accuracy",
        slice="all",
        higher_is_better=True,
        blocks=True,
        n_items=20,
        difference=-0.5,
        test="mixture_mcnemar",
        e_value=93.0,
        e_max=93.0,
        p_anytime=0.0107,
        decided=True,
        verdict="regressed",
        alpha=0.05,
        batch=10,
        plan_items=60,
        stopped_after=20,
        calls_planned=120,
        calls_made=40,
        calls_saved=80,
    )
    runs = pd.DataFrame([row], columns=RUN_COLUMNS)  # noqa: F841 (DuckDB reads it by name)
    con = duckdb.connect()
    con.execute("CREATE SCHEMA metamorph_meta")
    con.execute("CREATE TABLE metamorph_meta.sequential_runs AS SELECT * FROM runs")
    same = pd.DataFrame({"metric": ["accuracy"], "slice": ["all"], "n_items": [20]})
    seq = sequential_summary(con, "format_robustness", "cand", same)
    assert sequential_line(seq) == (
        "sequential run: stopped after 20 of 60 items (anytime-valid test, α = 0.05, Holm over the blocking "
        "rows); 1 of 1 blocking rows decided; 80 of 120 calls saved"
    )
    # a later run compared 60 items: that run was not sequential
    assert sequential_summary(con, "format_robustness", "cand", same.assign(n_items=60)) is None
    assert sequential_summary(con, "format_robustness", "other", same) is None


class _Spec:
    def __init__(self, id, status):
        self.id, self.status = id, status


def test_a_sequential_run_needs_the_baseline_and_a_candidate():
    specs = [_Spec("a", "approved"), _Spec("b", "candidate"), _Spec("c", "retired")]
    assert sequential_parties(specs, ["a", "b", "c"]) == ("a", ["b"])
    with pytest.raises(SequentialError, match="approved baseline a among --models"):
        sequential_parties(specs, ["b"])
    with pytest.raises(SequentialError, match="needs a candidate"):
        sequential_parties(specs, ["a", "c"])


def _answer(rec) -> Reply:
    """stub-base always answers "refer" (right on construct's even records, which have an abnormal
    vital, wrong on the odd ones); stub-cand answers nothing parseable (wrong on every record)."""
    body = rec.json or {}
    if body.get("model") == "stub-base":
        text = json.dumps({"decision": "refer", "evidence": ["temperature_c"]})
    else:
        text = "I cannot tell."
    return Reply(200, chat_completion(text, model=body.get("model", "x"), prompt_tokens=10, completion_tokens=5))


def test_a_regressing_candidate_stops_early_and_saves_calls(tmp_path, clean_proxy_env):
    """Plan: 60 construct records × formats txt, md × k = 1 = 120 calls per model. The candidate is
    wrong on every record, the baseline right on the 50 % that must be referred: after 10 items 5
    discordant pairs (e = 2^5/6 = 5.3), after 20 items 10 (e = 2^10/11 = 93.1, anytime p 11/1024 =
    0.0107 < 0.05/3), so Holm decides the three blocking accuracy rows (txt, md, pooled) at the
    second batch. Both models stop after 20 items: 40 calls each reach the stub (80 in all, against
    240 for the plan), 80 saved per model."""
    stub = StubServer()
    try:
        stub.script("POST", "/v1/chat/completions", _answer)
        registry = tmp_path / "models.yaml"
        common = f"provider: openai_compatible, base_url: '{stub.url}/v1', api_key_env: STUB_KEY, max_concurrency: 2"
        registry.write_text(
            "models:\n"
            f"  - {{id: base, model: stub-base, {common}, status: approved}}\n"
            f"  - {{id: cand, model: stub-cand, {common}, status: candidate, "
            "blocking_metrics: {format_robustness: [accuracy]}}\n"
        )
        env = {
            **os.environ,
            "STUB_KEY": "k",
            "METAMORPH_MODELS": str(registry),
            "METAMORPH_HOME": str(tmp_path / "home"),
            "DAGSTER_HOME": str(tmp_path / "dh"),
        }
        args = ["--limit", "60", "--k", "1", "--formats", "txt,md", "--no-routing", "--sequential", "--batch", "10"]
        out = subprocess.run(
            [sys.executable, "-m", "pipelines.run", "format_robustness", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        by_model = stub.count_by(lambda r: (r.json or {}).get("model"), "/v1/chat/completions")
    finally:
        stub.close()
    assert out.returncode == 0, out.stderr[-3000:]
    assert dict(by_model) == {"stub-base": 40, "stub-cand": 40}
    assert "sequential: cand after 10 items: 0 of 3 blocking rows decided" in out.stdout
    assert "sequential: cand stops after 20 of 60 items (every blocking row decided)" in out.stdout
    assert (
        "  cand: stopped after 20 of 60 items (every blocking row decided); 3 of 3 blocking rows decided "
        "(regressed 3); 40 of 120 calls made, 80 saved"
    ) in out.stdout
    assert "  base (baseline): 20 of 60 items; 40 of 120 calls made, 80 saved" in out.stdout
    con = duckdb.connect(str(tmp_path / "home" / "metamorph.duckdb"), read_only=True)
    try:
        runs = con.execute(
            "SELECT metric, slice, n_items, test, e_max, p_anytime, decided, verdict, stopped_after, calls_saved "
            "FROM metamorph_meta.sequential_runs WHERE metric = 'accuracy' ORDER BY slice"
        ).fetchall()
        fixed = con.execute(
            "SELECT slice, n_items, verdict FROM format_robustness.model_comparison "
            "WHERE candidate_id = 'cand' AND metric = 'accuracy' ORDER BY slice"
        ).fetchall()
    finally:
        con.close()
    e10 = 2**10 / 11
    assert [r[:4] for r in runs] == [
        ("accuracy", "ingestion=inline, dataset=construct", 20, "mixture_mcnemar"),
        ("accuracy", "ingestion=inline, dataset=construct, format=md", 20, "mixture_mcnemar"),
        ("accuracy", "ingestion=inline, dataset=construct, format=txt", 20, "mixture_mcnemar"),
    ]
    for r in runs:
        assert r[4] == pytest.approx(e10) and r[5] == pytest.approx(11 / 1024)
        assert r[6:] == (True, "regressed", 20, 80)
    # the fixed-sample comparison on the 20 items says the same
    assert [v for _, n, v in fixed] == ["regressed"] * 3 and {n for _, n, _ in fixed} == {20}
    # the verdict says it was sequential
    verdict = subprocess.run(
        [sys.executable, "-m", "metamorph.cli", "verdict", "--model", "cand", "--study", "format_robustness"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verdict.returncode == 1, verdict.stderr
    assert (
        "sequential run: stopped after 20 of 60 items (anytime-valid test, α = 0.05, Holm over the blocking rows); "
        "3 of 3 blocking rows decided; 80 of 120 calls saved"
    ) in verdict.stdout


@pytest.mark.parametrize(
    "case, extra, line",
    [
        (
            "no limit",
            [],
            "error: --sequential needs --limit N: the most items per source the run may generate (the plan)",
        ),
        (
            "no candidate",
            ["--limit", "20", "--models", "base"],
            "error: --sequential needs a candidate (status: candidate) among --models",
        ),
    ],
)
def test_a_sequential_run_without_what_it_needs_is_one_line_exit_2_and_writes_nothing(tmp_path, case, extra, line):
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n"
        "  - {id: base, provider: openai_compatible, model: m, base_url: 'http://127.0.0.1:9/v1', "
        "api_key_env: STUB_KEY, status: approved}\n"
        "  - {id: other, provider: openai_compatible, model: m, base_url: 'http://127.0.0.1:9/v1', "
        "api_key_env: STUB_KEY, status: candidate}\n"
    )
    env = {
        **os.environ,
        "STUB_KEY": "k",
        "METAMORPH_MODELS": str(registry),
        "METAMORPH_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(tmp_path / "dh"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.run", "format_robustness", "--sequential", *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and out.stderr.strip() == line
    assert not (tmp_path / "home").exists() and not (tmp_path / "dh").exists()
