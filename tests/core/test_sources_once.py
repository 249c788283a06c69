"""A run reads, parses and samples its sources once (:func:`metamorph.study.sources_loaded_once`),
and the launch check validates the rows the run uses: the user's ``--limit`` and ``--sample-seed``.

The file reads are counted by wrapping the real reader of :mod:`metamorph.datasets` (every file
source goes through ``read_rows`` → ``_read_bytes``) in the ``metamorph`` process; the models are
the project's HTTP stub on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

REPO = Path(__file__).resolve().parents[2]
MEDQA = Path(os.environ.get("METAMORPH_SHARED", "/work/shared")) / "datasets" / "medqa" / "sample.jsonl"

#: ``metamorph <argv>`` with every file read of metamorph.datasets counted; the last line of
#: stdout is ``reads: <the paths read, in order>``.
COUNTED = """
import sys
import metamorph.datasets as datasets
from metamorph.cli import main

reads = []
real = datasets._read_bytes


def counted(uri, is_remote):
    reads.append(uri)
    return real(uri, is_remote)


datasets._read_bytes = counted
code = main(sys.argv[1:])
print("reads:", reads)
sys.exit(code)
"""


def metamorph(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    environ = {
        **os.environ,
        "METAMORPH_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(tmp_path / "dh"),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", COUNTED, *argv],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )


def reads(out: subprocess.CompletedProcess) -> list[str]:
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("reads: "), out.stdout[-2000:]
    return eval(last.removeprefix("reads: "))  # the repr of a list of paths


def stub_registry(tmp_path: Path, url: str, ids: tuple[str, ...] = ("stub",)) -> Path:
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n"
        + "".join(
            f"  - {{id: {i}, provider: openai_compatible, model: stub-model, base_url: '{url}/v1', "
            "api_key_env: STUB_KEY, max_concurrency: 2}\n"
            for i in ids
        )
    )
    return registry


@pytest.mark.skipif(not MEDQA.exists(), reason="the MedQA sample is in METAMORPH_SHARED")
def test_metamorph_run_reads_its_source_once(tmp_path, clean_proxy_env):
    """``metamorph run`` of the format study on the MedQA sample: the command's check, the inputs
    job's launch check and ``source_instances`` share one read of the file; 2 sampled rows × 2
    formats × k = 1 = 4 calls reach the stub."""
    from tests.core.stub_http import StubServer
    from tests.core.test_concurrent_runs import answer

    stub = StubServer()
    try:
        stub.script("POST", "/v1/chat/completions", answer)
        registry = stub_registry(tmp_path, stub.url)
        out = metamorph(
            tmp_path,
            "run",
            "format_robustness",
            "--source",
            f"medqa:{MEDQA}",
            "--limit",
            "2",
            "--formats",
            "txt,md",
            "--k",
            "1",
            "--no-routing",
            STUB_KEY="k",
            METAMORPH_MODELS=str(registry),
        )
        n_calls = len(stub.requests_to("/v1/chat/completions"))
    finally:
        stub.close()
    assert out.returncode == 0, out.stderr[-3000:]
    assert reads(out) == [str(MEDQA)]
    assert n_calls == 4


@pytest.mark.skipif(not MEDQA.exists(), reason="the MedQA sample is in METAMORPH_SHARED")
def test_metamorph_plan_reads_its_source_once_for_every_model(tmp_path):
    """``metamorph plan`` for two models: one read serves both models' cost plans and the detectable effects."""
    registry = stub_registry(tmp_path, "http://127.0.0.1:9", ("m1", "m2"))
    out = metamorph(
        tmp_path,
        "plan",
        "format_robustness",
        "--source",
        f"medqa:{MEDQA}",
        "--limit",
        "2",
        "--k",
        "1",
        "--registry",
        str(registry),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert reads(out) == [str(MEDQA)]
    assert "  m1 workflow_generations: 8 requests" in out.stdout
    assert "  m2 workflow_generations: 8 requests" in out.stdout


def medqa_row(i: int, gold: str) -> str:
    return json.dumps(
        {
            "id": f"q{i}",
            "question": f"Question {i}?",
            "options": {"A": "a", "B": "b", "C": "c", "D": "d"},
            "answer_idx": gold,
        }
    )


#: ``--limit 1`` of a 3-row file keeps row index ``sorted(random.Random(seed).sample(range(3), 1))``:
#: seed 0 (the default) → 1, seed 1 → 0, seed 5 → 2 (the bad row, line 3 of the file).
SEED_VALID, SEED_BAD = 1, 5


def seeded_source(tmp_path: Path) -> Path:
    path = tmp_path / "three.jsonl"
    path.write_text("\n".join([medqa_row(1, "A"), medqa_row(2, "B"), medqa_row(3, "E")]) + "\n", encoding="utf-8")
    return path


def test_the_user_set_seed_is_the_one_the_run_checks(tmp_path):
    """``--sample-seed`` whose sample holds a bad row is refused before any run (one line naming the
    file, row and field; exit 2), although the default seed's sample is valid; the seed whose
    sample is valid is accepted and its row is the one written."""
    import duckdb

    path = seeded_source(tmp_path)
    args = ("run", "format_robustness", "--source", f"medqa:{path}", "--limit", "1", "--no-models")
    bad = metamorph(tmp_path, *args, "--sample-seed", str(SEED_BAD))
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"error: {path}, row 3, field 'answer_idx': gold label 'E' is not one of A, B, C, D"
    ]
    assert not (tmp_path / "dh").exists() and not (tmp_path / "home" / "metamorph.duckdb").exists()

    good = metamorph(tmp_path, *args, "--sample-seed", str(SEED_VALID))
    assert good.returncode == 0, good.stderr[-3000:]
    assert reads(good) == [str(path)]
    con = duckdb.connect(str(tmp_path / "home" / "metamorph.duckdb"), read_only=True)
    try:
        ids = con.execute("SELECT instance_id FROM format_robustness.source_instances").fetchall()
    finally:
        con.close()
    assert ids == [("q1",)]


def test_the_launch_check_samples_with_the_runs_seed(tmp_path, monkeypatch):
    """The inputs job's launch check (the launchpad's path) loads the rows with the config's
    ``sample_seed``: the bad row's seed is refused with one line and no run (the default seed's
    sample is valid), and so is a seed out of range, in ``--sample-seed``'s words."""
    from pipelines.definitions import defs
    from pipelines.inputs import InputsRejected

    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / "home"))
    path = seeded_source(tmp_path)
    op = "format_robustness__source_instances"
    job = defs.resolve_job_def("format_robustness_inputs_job")

    def config(seed):
        return {"ops": {op: {"config": {"sources": [f"medqa:{path}"], "limit": 1, "sample_seed": seed}}}}

    with dg.instance_for_test() as instance:
        with pytest.raises(InputsRejected) as err:
            job.execute_in_process(instance=instance, run_config=config(SEED_BAD))
        assert str(err.value) == f"{path}, row 3, field 'answer_idx': gold label 'E' is not one of A, B, C, D"
        assert instance.get_runs() == []
        with pytest.raises(InputsRejected) as err:
            job.execute_in_process(instance=instance, run_config=config(-1))
        assert str(err.value) == f"{op}: sample_seed: must be a whole number from 0 to 2147483647, got '-1'"
        assert instance.get_runs() == []
