"""A call that failed at the provider is not the model's answer: every metric of the format study
leaves it out of its numerator and denominator, says how many it left out, and says "not
measurable" where nothing is left; `metamorph run` says so on stdout and exits 3.

The end-to-end cases run the real command against the local HTTP stub (the provider boundary);
the metric cases are counted by hand."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from metamorph.studies.format_robustness import metrics as fr
from metamorph.studies.format_robustness import mitigations as mit
from tests.core.stub_http import Reply, StubServer, chat_completion

REPO = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"
FORMATS = ("txt", "md", "json", "csv")


def frame(rows: list[tuple]) -> pd.DataFrame:
    """Generations of workflow "wf", dataset "ds" from ``(instance, format, repeat, decision,
    call_error)``; gold "yes" everywhere, one evidence category "c" on every reply."""
    out = []
    for inst, fmt, rep, dec, err in rows:
        out.append(
            dict(
                workflow_id="wf",
                dataset="ds",
                instance_id=inst,
                format=fmt,
                repeat=rep,
                decision=dec,
                gold="yes",
                is_correct=None if err else dec == "yes",
                categories=[] if err else ["c"],
                favorable=None,
                call_error=err,
            )
        )
    return pd.DataFrame(out)


# Two instances × 2 formats × k = 2. i1: every reply "yes". i2: txt "yes", "yes"; md repeat 1
# failed at the provider, md repeat 2 "no".
ROWS = [
    ("i1", "txt", 1, "yes", False),
    ("i1", "txt", 2, "yes", False),
    ("i1", "md", 1, "yes", False),
    ("i1", "md", 2, "yes", False),
    ("i2", "txt", 1, "yes", False),
    ("i2", "txt", 2, "yes", False),
    ("i2", "md", 1, None, True),
    ("i2", "md", 2, "no", False),
]


def test_mr_flags_leave_the_group_and_the_instance_of_a_failed_call_undefined():
    flags = fr.mr_flags(frame(ROWS)).set_index(["instance_id", "repeat"])
    # i2 repeat 1 holds the failed call: no MR1/MR2 (it is not ⊥ against "yes"); i2 repeat 2 is a
    # real flip (yes vs no); MR3 of i2 is unknown (md's S_f needs both md replies)
    assert flags["mr1"].tolist() == [False, False, pd.NA, True]
    assert flags["mr2"].tolist() == [False, False, pd.NA, False]
    assert flags["mr3"].tolist() == [False, False, pd.NA, pd.NA]
    assert flags["n_call_errors"].tolist() == [0, 0, 1, 0]
    assert flags["n_parsed"].tolist() == [2, 2, 1, 2]
    assert flags.loc[("i2", 2), "mr3_note"] == fr.NOT_MEASURABLE_CALL_FAILED


def test_mr_violations_count_failed_calls_apart_from_the_rate():
    mrv = fr.mr_violations(fr.mr_flags(frame(ROWS))).set_index("relation")
    # M1: 1 violating group (i2, r2) of the 3 groups without a failed call; read as ⊥ it was 2 of 4
    assert mrv.loc["MR1", "violation_pct"] == pytest.approx(100 / 3)
    assert mrv.loc["MR1", "n_groups"] == 3
    assert mrv.loc["MR1", "n_calls"] == 8 and mrv.loc["MR1", "n_call_errors"] == 1
    assert mrv.loc["MR1", "n_undefined"] == 0  # the failed call's group is not "undefined", it is a failed call
    # M3 over the one instance without a failed call (i1, stable in both formats)
    assert mrv.loc["MR3", "violation_pct"] == 0.0 and mrv.loc["MR3", "n_groups"] == 2
    assert mrv["not_measurable"].isna().all()


def test_accuracy_and_stability_leave_failed_calls_out_of_n():
    acc = fr.accuracy_by_format(frame(ROWS)).set_index("format")
    # md: 3 replies (yes, yes, no) of which 2 correct; the failed call is not "wrong"
    assert acc.loc["md", "accuracy_pct"] == pytest.approx(200 / 3)
    assert (acc.loc["md", "n"], acc.loc["md", "n_unparseable"], acc.loc["md", "n_call_errors"]) == (3, 0, 1)
    assert (acc.loc["txt", "accuracy_pct"], acc.loc["txt", "n"], acc.loc["txt", "n_call_errors"]) == (100.0, 4, 0)
    stb = fr.stability_by_format(frame(ROWS)).set_index("format")
    # md: i2's cell has a failed call and is left out: 1 instance (i1, stable)
    assert (stb.loc["md", "stability_pct"], stb.loc["md", "n_instances"], stb.loc["md", "n_call_errors"]) == (
        100.0,
        1,
        1,
    )
    assert (stb.loc["txt", "stability_pct"], stb.loc["txt", "n_instances"], stb.loc["txt", "n_call_errors"]) == (
        100.0,
        2,
        0,
    )


def test_flip_rate_and_vote_skip_what_needs_the_failed_call():
    drift = fr.evidence_drift(frame(ROWS)).set_index("format")
    # md against txt: groups (i1,1) (i1,2) (i2,2) paired; (i2,2) flips: 1 of 3
    assert drift.loc["md", "flip_rate_pct"] == pytest.approx(100 / 3) and drift.loc["md", "n_groups"] == 3
    vote = mit.vote_aggregation(frame(ROWS)).set_index("relation")
    # i2 has a failed call and is out of the vote; i1 votes yes in both formats: M1 after 0 of 1
    assert vote.loc["MR1", "after_pct"] == 0.0 and vote.loc["MR1", "n_after"] == 1


def test_a_cell_whose_requests_were_not_sent_says_not_sent_not_that_its_calls_failed():
    from metamorph.measurability import every_call_failed

    # i1, i2 in txt (answered) and docx, which the ingestion path cannot take: never sent
    cells = [(i, f) for i in ("i1", "i2") for f in ("txt", "docx")]
    gen = frame([(i, f, r, "yes" if f == "txt" else None, f == "docx") for i, f in cells for r in (1, 2)])
    gen["not_sent"] = gen["format"].eq("docx")
    acc = fr.accuracy_by_format(gen).set_index("format")
    assert acc.loc["docx", "not_measurable"] == "not measurable: not sent (4 of 4 requests)"
    assert acc.loc["docx", "n_call_errors"] == 4 and pd.isna(acc.loc["docx", "accuracy_pct"])
    assert pd.isna(acc.loc["txt", "not_measurable"]) and acc.loc["txt", "accuracy_pct"] == 100.0
    stb = fr.stability_by_format(gen).set_index("format")
    assert stb.loc["docx", "not_measurable"] == "not measurable: not sent (4 of 4 requests)"
    flags = fr.mr_flags(gen)
    assert flags["n_not_sent"].tolist() == [1, 1, 1, 1] and flags["n_call_errors"].tolist() == [1, 1, 1, 1]
    mrv = fr.mr_violations(flags).set_index("relation")
    # every group holds the docx request, never sent: no relation is measurable, and none "failed"
    assert (
        mrv.loc["MR1", "not_measurable"]
        == "not measurable: every group has a request that was not sent (4 of 8 not sent)"
    )
    assert mrv.loc["MR2", "not_measurable"] == mrv.loc["MR1", "not_measurable"]
    # a table read from flags written before the count: the failed-call wording, as before
    old = fr.mr_violations(flags.drop(columns="n_not_sent")).set_index("relation")
    assert old.loc["MR1", "not_measurable"] == "not measurable: every group has a failed call (4 of 8 calls failed)"
    # every request of a slice a call error, some failed and some not sent; all not sent; none
    assert every_call_failed(6, 2) == "not measurable: every call failed or was not sent (4 failed, 2 not sent, of 6)"
    assert every_call_failed(6, 6) == "not measurable: not sent (6 of 6 requests)"
    assert every_call_failed(6) == "not measurable: every call failed (6 of 6)"
    assert fr.not_measurable_reason(3, 3, n_not_sent=1) == (
        "not measurable: every call failed or was not sent (2 failed, 1 not sent, of 3)"
    )
    # a not-sent row that is not a call error is an invalid frame
    bad = gen.copy()
    bad.loc[0, "not_sent"] = True
    with pytest.raises(ValueError, match="generations: a row with not_sent is not a call_error"):
        fr.accuracy_by_format(bad)


def test_every_call_failed_is_not_measurable_never_zero():
    rows = [(i, f, r, None, True) for i in ("i1", "i2") for f in ("txt", "md") for r in (1, 2)]
    mrv = fr.mr_violations(fr.mr_flags(frame(rows)))
    assert mrv["violation_pct"].isna().all()
    assert mrv["not_measurable"].tolist() == ["not measurable: every call failed (8 of 8)"] * 3
    assert mrv["ci_low_pct"].isna().all() and mrv["n_groups"].tolist() == [0, 0, 0]
    acc = fr.accuracy_by_format(frame(rows))
    assert acc["accuracy_pct"].isna().all() and acc["n"].tolist() == [0, 0]
    assert acc["not_measurable"].tolist() == ["not measurable: every call failed (4 of 4)"] * 2
    stb = fr.stability_by_format(frame(rows))
    assert stb["stability_pct"].isna().all()
    assert stb["not_measurable"].tolist() == ["not measurable: every call failed (4 of 4)"] * 2
    vote = mit.vote_aggregation(frame(rows))
    assert vote["after_pct"].isna().all()
    assert vote["not_measurable"].tolist() == ["not measurable: every call failed (8 of 8)"] * 3
    choice = mit.routing_choice(frame(rows))
    assert choice[["best_format", "criterion"]].values.tolist() == [["txt", "default"]]
    assert math.isnan(choice["score_pct"].iloc[0])


def test_no_reply_parsed_and_no_evidence_are_not_measurable():
    rows = [(i, f, r, None, False) for i in ("i1", "i2") for f in ("txt", "md") for r in (1, 2)]
    gen = frame(rows).assign(categories=[[]] * 8)
    mrv = fr.mr_violations(fr.mr_flags(gen)).set_index("relation")
    # ⊥ against ⊥ everywhere would read as 0 % violations of MR1 and MR3
    assert mrv.loc["MR1", "not_measurable"] == "not measurable: no reply parsed (8 of 8 unparseable)"
    assert mrv.loc["MR3", "not_measurable"] == "not measurable: no reply parsed (8 of 8 unparseable)"
    # ∅ against ∅ would read as consistent evidence: 0 of 0 items is not a measurement of MR2
    assert mrv.loc["MR2", "not_measurable"] == "not measurable: no reply gave evidence (0 of 8 replies)"
    assert mrv["violation_pct"].isna().all()


# ------------------------------------------------------------------------------------------
# End to end: `python -m pipelines.run format_robustness` against the stub.


def _replying(fail):
    """The stub's chat route: "refer" with one evidence item, or an OpenAI reply without choices
    (the SDK's call fails, not retried) when ``fail(user message)``."""

    def reply(rec) -> Reply:
        text = rec.json["messages"][-1]["content"]
        if fail(text):
            body = chat_completion("", model="stub-model")
            body["choices"] = []
            return Reply(200, body)
        return Reply(
            200,
            chat_completion(
                json.dumps({"decision": "refer", "evidence": ["patient has fever"]}),
                model="stub-model",
                prompt_tokens=10,
                completion_tokens=5,
            ),
        )

    return reply


def _run(tmp_path: Path, fail) -> tuple[subprocess.CompletedProcess, int]:
    stub = StubServer()
    try:
        stub.script("POST", CHAT, _replying(fail))
        registry = tmp_path / "models.yaml"
        registry.write_text(
            "models:\n  - {id: stub, provider: openai_compatible, model: stub-model, "
            f"base_url: '{stub.url}/v1', api_key_env: STUB_KEY, max_concurrency: 2}}\n"
        )
        env = {
            **os.environ,
            "STUB_KEY": "k",
            "METAMORPH_MODELS": str(registry),
            "METAMORPH_HOME": str(tmp_path / "home"),
            "DAGSTER_HOME": str(tmp_path / "dh"),
        }
        argv = ["format_robustness", "--limit", "2", "--k", "3", "--no-routing"]
        out = subprocess.run(
            [sys.executable, "-m", "pipelines.run", *argv],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        return out, len(stub.requests_to(CHAT))
    finally:
        stub.close()


def _table(tmp_path: Path, sql: str) -> pd.DataFrame:
    con = duckdb.connect(str(tmp_path / "home" / "metamorph.duckdb"), read_only=True)
    try:
        return con.execute(sql).df()
    finally:
        con.close()


def test_a_run_with_failed_calls_scores_only_the_replies_says_so_and_exits_3(tmp_path, clean_proxy_env):
    """construct, 2 instances × 4 formats × k = 3 = 24 calls; the 3 md calls of the first record
    (construct-0-0000, gold refer) fail. Every reply is "refer": M1 = 0 over the 3 groups of the
    second record (read as ⊥ the failed calls made M1 = 50 %); accuracy of md is the second
    record's 3 replies, all wrong (gold "do not refer")."""
    out, n_calls = _run(tmp_path, lambda text: "| age | 67 |" in text)
    assert n_calls == 24
    assert out.returncode == 3, out.stderr[-3000:]
    line = "3 of 24 calls failed at the provider (workflow_generations 3 of 24)"
    assert f"warning: {line}: they are not answers and every table leaves them out" in out.stdout
    assert out.stdout.rstrip().endswith(f"Finished with failed calls (exit 3): {line}.")
    mrv = _table(tmp_path, "SELECT * FROM format_robustness.mr_violations ORDER BY relation")
    assert mrv[
        ["relation", "violation_pct", "n_groups", "n_instances", "n_calls", "n_call_errors"]
    ].values.tolist() == [
        ["MR1", 0.0, 3, 1, 24, 3],
        ["MR2", 0.0, 3, 1, 24, 3],
        ["MR3", 0.0, 3, 1, 24, 3],
    ]
    acc = _table(tmp_path, "SELECT format, accuracy_pct, n, n_call_errors FROM format_robustness.accuracy_by_format")
    assert acc.values.tolist() == [["txt", 50.0, 6, 0], ["md", 0.0, 3, 3], ["json", 50.0, 6, 0], ["csv", 50.0, 6, 0]]
    assert "n_call_errors" in out.stdout  # the accuracy table shows the failed calls per format


def test_a_run_whose_every_call_failed_prints_not_measurable_never_a_rate(tmp_path, clean_proxy_env):
    out, n_calls = _run(tmp_path, lambda text: True)
    assert n_calls == 24
    assert out.returncode == 3, out.stderr[-3000:]
    assert "warning: 24 of 24 calls failed at the provider (workflow_generations 24 of 24)" in out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("| stub/inline"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == cells[6] == cells[8] == "not measurable: every call failed (24 of 24)"
    assert "0.0 [0.0, 0.0]" not in out.stdout
    acc = _table(
        tmp_path, "SELECT accuracy_pct, n, n_call_errors, not_measurable FROM format_robustness.accuracy_by_format"
    )
    assert acc["accuracy_pct"].isna().all()
    assert (
        acc[["n", "n_call_errors", "not_measurable"]].values.tolist()
        == [[0, 6, "not measurable: every call failed (6 of 6)"]] * 4
    )
