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
    # two groups span studies: model_upgrades (the report card; its logic is shared: metamorph.report_card)
    # and model_registry (the registry's entries, assets/registry.py)
    assert (
        groups - {"model_upgrades", "model_registry"}
        == set(STUDIES)
        == {"format_robustness", "wrapper_sensitivity", "workflow_perturb", "order_probe"}
    )
    assert (REPO / "assets" / "model_upgrades.py").is_file() and (REPO / "assets" / "registry.py").is_file()
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


# ------------------------------------------------------------------------------------------
# Private means private: a leading underscore is a module's own business


_PRODUCT = ("metamorph", "assets", "pipelines", "resources")
_FIRST_PARTY = frozenset(_PRODUCT)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_from(path: Path, node) -> str:
    """The absolute module an ``ImportFrom`` node of ``path`` imports from."""
    if not node.level:
        return node.module
    base = _module_name(path).split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(path: Path) -> list[str]:
    """Where ``path`` uses another module's underscore name: ``from x import _y`` (any module x
    but its own), or ``m._y`` on a first-party module ``m`` it imported (``import a.b as m``,
    ``from a import b as m``)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = _module_name(path)
    modules: dict[str, str] = {}  # local name -> first-party module it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _imported_from(path, node)
            for alias in node.names:
                if _is_private(alias.name) and target != me:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: from {target} import {alias.name}")
                if target.split(".")[0] in _FIRST_PARTY:
                    modules[alias.asname or alias.name] = f"{target}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in _FIRST_PARTY:
                    local = alias.asname or alias.name.split(".")[0]
                    modules[local] = alias.name if alias.asname else local
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            chain, base = [], node.value
            while isinstance(base, ast.Attribute):
                chain.insert(0, base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in modules:
                owner = ".".join([modules[base.id], *chain])
                if owner != me:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    return sorted(found)


def test_private_imports_finds_both_spellings(tmp_path, monkeypatch):
    pkg = tmp_path / "metamorph"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "from metamorph.b import _hidden, shown\n"
        "from . import b as bee\n"
        "import metamorph.b\n"
        "x = bee._helper() + metamorph.b._other + bee.public\n",
        encoding="utf-8",
    )
    (pkg / "b.py").write_text("from metamorph.b import _self_is_fine\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert private_imports(pkg / "a.py") == [
        "metamorph/a.py:1: from metamorph.b import _hidden",
        "metamorph/a.py:4: bee._helper",
        "metamorph/a.py:4: metamorph.b._other",
    ]
    assert private_imports(pkg / "b.py") == []


def test_no_module_uses_another_modules_private_names():
    # modules share helpers through public names (a study's vocab / slots / _common-style
    # modules), never by reaching into each other's underscore names
    found = [
        hit for folder in _PRODUCT for path in sorted((REPO / folder).rglob("*.py")) for hit in private_imports(path)
    ]
    assert found == []


#: Library modules without ``__all__`` (none).
_WITHOUT_ALL: set[str] = set()


def test_every_library_module_declares_its_surface_in_all():
    missing, wrong = [], []
    for info in pkgutil.walk_packages(metamorph.__path__, "metamorph."):
        module = importlib.import_module(info.name)
        names = getattr(module, "__all__", None)
        if names is None:
            missing.append(info.name)
            continue
        assert isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names), info.name
        assert len(set(names)) == len(names), (info.name, "duplicate names in __all__")
        wrong += [f"{info.name}.{n}" for n in names if not hasattr(module, n) or _is_private(n)]
    assert sorted(missing) == sorted(_WITHOUT_ALL)
    assert wrong == []


def test_what_the_product_imports_from_the_library_is_in_the_modules_all():
    import ast

    outside = []
    for folder in _PRODUCT:
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ImportFrom):
                    continue
                target = _imported_from(path, node)
                if target.split(".")[0] != "metamorph" or target in _WITHOUT_ALL:
                    continue
                module = importlib.import_module(target)
                for alias in node.names:
                    is_submodule = f"{target}.{alias.name}" in sys.modules
                    if not is_submodule and alias.name not in module.__all__:
                        outside.append(f"{path.relative_to(REPO)}:{node.lineno}: {target}.{alias.name}")
    assert outside == []


def repeated_vocabulary(study: str) -> list[str]:
    """Literal lists of a study's vocabulary outside its ``vocab`` module: a tuple, list or set of
    two or more strings, in the study's package or its assets module, all of them names of one
    ``vocab`` tuple (a partial list included)."""
    import ast

    vocab = importlib.import_module(f"metamorph.studies.{study}.vocab")
    tuples = {
        name: set(value)
        for name, value in vars(vocab).items()
        if name in vocab.__all__ and isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    }
    paths = [*sorted((REPO / "metamorph" / "studies" / study).rglob("*.py")), REPO / "assets" / f"{study}.py"]
    found = []
    for path in paths:
        if path.name == "vocab.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or len(node.elts) < 2:
                continue
            if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                continue
            values = {e.value for e in node.elts}
            for name, names in tuples.items():
                if len(values) >= 2 and values <= names:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {sorted(values)} ⊆ vocab.{name}")
    return found


def test_each_study_declares_its_vocabulary_once_in_its_vocab_module():
    for study in STUDIES:
        assert importlib.import_module(f"metamorph.studies.{study}.vocab").__all__, study
    assert [hit for study in STUDIES for hit in repeated_vocabulary(study)] == []


def test_no_asset_module_imports_pipelines():
    """``pipelines`` (jobs, sensors, schedules, the code location) wires the assets, never the
    reverse: what both need — the model partitions (``assets.partitions``), what a study's
    generation asset recorded (``assets.evaluations``) — lives in ``assets/``."""
    import ast

    found = []
    for path in sorted((REPO / "assets").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            if any(n == "pipelines" or n.startswith("pipelines.") for n in names):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {', '.join(names)}")
    assert len(list((REPO / "assets").glob("*.py"))) >= 8
    assert found == []
