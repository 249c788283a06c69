"""The layout is the architecture: one package per study, named like its asset group, and a pure core."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import metamorph.studies
from pipelines.definitions import defs

REPO = Path(__file__).resolve().parents[2]
STUDIES = sorted(m.name for m in pkgutil.iter_modules(metamorph.studies.__path__) if m.ispkg)


def test_importing_the_library_imports_no_dagster():
    # every module of metamorph, in a fresh interpreter: none may pull Dagster in
    code = (
        "import importlib, pkgutil, sys, metamorph\n"
        "for m in pkgutil.walk_packages(metamorph.__path__, 'metamorph.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(sorted(k for k in sys.modules if k == 'dagster' or k.startswith('dagster.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_each_asset_group_is_a_study_package_with_the_same_module_names():
    groups = {spec.group_name for spec in defs.resolve_all_asset_specs()}
    # one group spans studies: model_upgrades (the report card; its logic is shared: metamorph.report_card)
    assert (
        groups - {"model_upgrades"}
        == set(STUDIES)
        == {"format_robustness", "wrapper_sensitivity", "workflow_perturb", "order_probe"}
    )
    assert (REPO / "assets" / "model_upgrades.py").is_file()
    for study in STUDIES:
        for module in ("plan", "metrics", "schemas", "report"):
            importlib.import_module(f"metamorph.studies.{study}.{module}")
        assert (REPO / "assets" / f"{study}.py").is_file(), study
        assert (REPO / "tests" / study).is_dir(), study
        # asset keys carry the study as their prefix
        keys = [spec.key for spec in defs.resolve_all_asset_specs() if spec.group_name == study]
        assert keys and all(k.path[0] == study for k in keys), study


def test_no_shared_module_names_a_study():
    # shared machinery at the top of metamorph/ is study-agnostic: it names no study package
    # (metamorph.cli finds the studies' commands without naming them)
    shared = [*(REPO / "metamorph").glob("*.py"), *(REPO / "metamorph" / "providers").glob("*.py")]
    assert len(shared) > 10
    for path in shared:
        text = path.read_text(encoding="utf-8")
        for study in STUDIES:
            assert f"metamorph.studies.{study}" not in text and f"studies/{study}" not in text, (path.name, study)


def test_every_text_file_is_read_through_the_shared_decoder():
    """Only ``metamorph.datasets`` opens text files (``read_text``, ``read_json_file``,
    ``read_rows``: UTF-8, a leading byte-order mark dropped, before a format is sniffed); no other
    module of the product reads text itself."""
    import re

    direct = re.compile(
        r"\.read_text\(|\bopen\([^)]*encoding=|\.open\(\s*(?:encoding=|\"r\"|'r')|"
        r"\bjson\.load\(|read_csv\((?!io\.StringIO)|\bsafe_load\(open"
    )
    found = []
    for folder in ("metamorph", "assets", "pipelines", "resources"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == REPO / "metamorph" / "datasets.py":
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if direct.search(line):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert found == []


def test_only_a_studys_own_files_name_it():
    """A study's package name (as a word) appears only in its own files — ``metamorph/studies/<s>/``,
    ``assets/<s>.py`` (and ``sql/<s>/``, ``tests/<s>/``): every other product module reaches the
    studies through :func:`metamorph.study.studies`, so adding a study touches nothing shared."""
    import re

    found = []
    for folder in ("metamorph", "assets", "pipelines", "resources"):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO)
            lines = path.read_text(encoding="utf-8").splitlines()
            for study in STUDIES:
                if rel.parts[:3] == ("metamorph", "studies", study) or rel == Path("assets", f"{study}.py"):
                    continue
                word = re.compile(rf"\b{study}\b")
                found += [f"{rel}:{n}: {study}" for n, line in enumerate(lines, start=1) if word.search(line)]
    assert found == []
