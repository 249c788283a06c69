"""The layout is the architecture: one package per study, named like its asset group, and a pure core."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import metamorph
from metamorph.study import studies
from pipelines.definitions import defs

REPO = Path(__file__).resolve().parents[2]
STUDIES = sorted(studies())


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
    assert groups - {"model_upgrades", "model_registry"} == set(STUDIES)
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

    from metamorph.study import get

    declared = get(study)
    tuples = {name: set(value) for name, value in declared.vocabulary().items()}
    package = Path(declared.vocab.__file__).parent
    assets_file = Path(importlib.import_module(declared.assets_module).__file__)
    paths = [*sorted(package.rglob("*.py")), assets_file]
    found = []
    for path in paths:
        if path == Path(declared.vocab.__file__):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or len(node.elts) < 2:
                continue
            if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                continue
            values = {e.value for e in node.elts}
            for name, names in tuples.items():
                if len(values) >= 2 and values <= names:
                    found.append(
                        f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{node.lineno}: {sorted(values)} ⊆ vocab.{name}"
                    )
    return found


def test_each_study_declares_its_vocabulary_once_in_its_vocab_module():
    from metamorph.study import get

    for study in STUDIES:
        assert get(study).vocab.__all__ and get(study).vocabulary(), study
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


# ------------------------------------------------------------------------------------------
# Dagster's private modules: one module of the product reaches them, each use saying why

#: The one product module allowed to import from Dagster's private modules (``dagster._…``).
DAGSTER_INTERNALS = Path("pipelines", "instance.py")


def _is_dagster(module: str) -> bool:
    return module.split(".")[0] == "dagster" or module.split(".")[0].startswith("dagster_")


def dagster_private_uses(path: Path) -> list[str]:
    """Where ``path`` imports a private module of Dagster or one of its libraries (``dagster._core…``,
    ``dagster_shared._…``), a private name from one (``from dagster_duckdb.io_manager import _x``),
    or reaches one through an attribute (``dg._core``): ``"<file>:<line>: <module or expression>"``."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(REPO)
    found, bound = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_dagster(alias.name):
                    bound.add(alias.asname or alias.name.split(".")[0])
                    if any(_is_private(p) for p in alias.name.split(".")):
                        found.append(f"{rel}:{node.lineno}: {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and _is_dagster(node.module):
            names = [f"{node.module}.{a.name}" for a in node.names]
            if any(_is_private(p) for p in node.module.split(".")):
                found.append(f"{rel}:{node.lineno}: {node.module}")
            else:
                found += [f"{rel}:{node.lineno}: {n}" for n in names if _is_private(n.rsplit(".", 1)[1])]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


def test_dagster_private_uses_finds_every_spelling(tmp_path, monkeypatch):
    pkg = tmp_path / "pipelines"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "import dagster as dg\n"
        "import dagster._utils.backoff\n"
        "from dagster._core.errors import DagsterError\n"
        "from dagster_duckdb.io_manager import _partition_where_clause, DuckDbClient\n"
        "x = dg._core.events\n"
        "y = dg.DagsterRunStatus\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert dagster_private_uses(pkg / "a.py") == [
        "pipelines/a.py:2: dagster._utils.backoff",
        "pipelines/a.py:3: dagster._core.errors",
        "pipelines/a.py:4: dagster_duckdb.io_manager._partition_where_clause",
        "pipelines/a.py:5: dg._core",
    ]


def test_only_one_module_uses_dagster_internals_and_says_which_public_api_is_missing():
    """Everything but :data:`DAGSTER_INTERNALS` uses Dagster's public API (``import dagster as dg``,
    the libraries' exported names); in that module, each private import follows a comment saying
    which public API Dagster does not have."""
    found = [
        hit
        for folder in _PRODUCT
        for path in sorted((REPO / folder).rglob("*.py"))
        if path.relative_to(REPO) != DAGSTER_INTERNALS
        for hit in dagster_private_uses(path)
    ]
    assert found == []
    lines = (REPO / DAGSTER_INTERNALS).read_text(encoding="utf-8").splitlines()
    uses = dagster_private_uses(REPO / DAGSTER_INTERNALS)
    assert (
        len(uses) == 7
    )  # the launch error class, the captured-interrupt check, three for the run origin, two for step logs
    for hit in uses:
        n = int(hit.split(":")[1])
        above = " ".join(line.strip() for line in lines[max(0, n - 5) : n - 1] if line.strip().startswith("#"))
        assert "no public" in above, hit


def test_model_files_are_handled_in_providers():
    """Locating, checking and loading a model's file (a GGUF of a llama_cpp entry) is the
    providers' business: no function outside ``metamorph/providers/`` is about GGUF files."""
    import ast

    found = []
    for folder in _PRODUCT:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.relative_to(REPO).parts[:2] == ("metamorph", "providers"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "gguf" in node.name.lower():
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.name}")
    assert found == []


# ------------------------------------------------------------------------------------------
# One discovery of the studies; the registry loads without the verdict layer


def test_the_studies_are_discovered_in_one_place():
    """Only :func:`metamorph.study.studies` walks ``metamorph/studies/`` (a study is a package with
    a ``study.py``); the commands, the traces, the verdict sources and the registry's
    ``study_params`` / ``blocking_metrics`` ask it instead of applying a rule of their own."""
    found = [
        str(path.relative_to(REPO))
        for folder in _PRODUCT
        for path in sorted((REPO / folder).rglob("*.py"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if "metamorph.studies.__path__" in line
    ]
    assert found == ["metamorph/study.py"]


def parts_found_by_module_name(path: Path) -> list[str]:
    """Where ``path`` finds a part of a study by a naming convention instead of asking the study's
    :class:`metamorph.study.Study`: a module name built from a study's name (an f-string starting
    ``metamorph.studies.`` or ``assets.``), ``study_module(...)``, or the shared ``SQL_DIR`` joined
    with a name."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        hit = None
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            head = str(node.values[0].value)
            if head in {"metamorph.studies.", "assets."} and len(node.values) > 1:
                hit = ast.unparse(node)
        elif isinstance(node, ast.Name) and node.id in {"study_module", "SQL_DIR"}:
            hit = node.id
        elif isinstance(node, ast.Attribute) and node.attr in {"study_module", "SQL_DIR"}:
            hit = ast.unparse(node)
        if hit is not None:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {hit}")
    return found


def test_parts_found_by_module_name_finds_every_spelling(tmp_path, monkeypatch):
    pkg = tmp_path / "pipelines"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "import importlib\n"
        "from metamorph.study import study_module\n"
        "import metamorph.sql\n"
        "m = importlib.import_module(f'assets.{name}')\n"
        "r = importlib.import_module(f'metamorph.studies.{name}.report')\n"
        "d = metamorph.sql.SQL_DIR / name\n"
        "ok = f'assets.py of {name}', f'metamorph.studies.x'\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert parts_found_by_module_name(pkg / "a.py") == [
        "pipelines/a.py:4: f'assets.{name}'",
        "pipelines/a.py:5: f'metamorph.studies.{name}.report'",
        "pipelines/a.py:6: metamorph.sql.SQL_DIR",
    ]


def test_no_module_finds_a_part_of_a_study_by_its_module_name():
    """A study's parts — its traces, commands, verdict sources, planned cells, card, vocabulary, SQL
    folder and assets module — are typed fields of its :class:`metamorph.study.Study`; only
    :func:`metamorph.study.studies` imports a module by a study's name (its ``study.py``)."""
    found = [
        hit
        for folder in _PRODUCT
        for path in sorted((REPO / folder).rglob("*.py"))
        if path.relative_to(REPO) != Path("metamorph", "study.py")
        for hit in parts_found_by_module_name(path)
    ]
    assert found == []
    from metamorph.study import Card, Comparison, studies

    for name, study in studies().items():
        assert isinstance(study.card, Card), name
        assert study.sql_dir.is_dir() and study.vocab is not None and study.vocabulary(), name
        assert study.assets_module in sys.modules or importlib.import_module(study.assets_module), name
        if study.compared_metrics:
            assert isinstance(study.comparison, Comparison), name


def test_loading_the_registry_imports_neither_the_verdict_layer_nor_a_report(tmp_path):
    # an entry naming a study in study_params and its metrics in blocking_metrics: both are checked
    # against the studies as declared, and a typo is still refused
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n"
        "  - {id: base, provider: llama_cpp, model: SmolLM2-135M-Instruct.Q4_1.gguf, status: approved}\n"
        "  - {id: cand, provider: llama_cpp, model: SmolLM2-135M-Instruct.Q4_1.gguf, status: candidate,\n"
        "     study_params: {order_probe: {temperature: 0}}, blocking_metrics: {order_probe: [recovery]}}\n",
        encoding="utf-8",
    )
    code = (
        "import sys\n"
        "from metamorph.models import load_registry\n"
        f"specs = load_registry({str(registry)!r})\n"
        "print([(s.id, s.blocking_metrics) for s in specs])\n"
        "print(sorted(k for k in sys.modules if k == 'metamorph.verdict' or (k.startswith('metamorph.') and k.endswith('.report'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["[('base', None), ('cand', {'order_probe': ('recovery',)})]", "[]"]


def restated_defaults(study: str) -> list[str]:
    """Where the study's package supplies its own fallback for an option that has a declared
    default (:attr:`metamorph.study.Option.default`; :class:`metamorph.study.Options` already holds
    it): ``options.k or 3``, ``options.max_tokens or GENERATOR_MAX_TOKENS``, ``getattr(options,
    "formats", None) or …``, ``options.seeds if options.seeds is not None else …``."""
    import ast

    from metamorph.study import get

    defaulted = {o.name for o in get(study).all_options() if o.default is not None}

    def option_read(node) -> str | None:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "options":
            return node.attr
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "options"
            and isinstance(node.args[1], ast.Constant)
        ):
            return node.args[1].value
        return None

    found = []
    package = Path(importlib.import_module(f"metamorph.studies.{study}").__file__).parent
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
                name = option_read(node.values[0])
            elif isinstance(node, ast.IfExp) and isinstance(node.test, ast.Compare):
                name = option_read(node.test.left)
            else:
                continue
            if name in defaulted:
                found.append(f"{path}:{node.lineno}: options.{name}")
    return found


def test_no_study_restates_an_options_declared_default():
    assert [hit for study in STUDIES for hit in restated_defaults(study)] == []


def library_imports_above(path: Path) -> list[str]:
    """Where the library module ``path`` imports ``assets``, ``pipelines`` or ``resources``:
    an import statement, or ``importlib.import_module("<name>")`` / ``__import__`` of one."""
    import ast

    above = {"assets", "pipelines", "resources"}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if not node.level else []
        elif (
            isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) == "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names = [str(node.args[0].value)]
        else:
            continue
        found += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in above]
    return found


def test_the_library_imports_nothing_above_it():
    """``metamorph/`` is the pure library: no module of it imports the Dagster project (``assets``,
    ``pipelines``, ``resources``), not even lazily; the project adds its commands to the console
    script through entry points (``pyproject.toml``: ``metamorph.commands``, ``metamorph.suites``)."""
    found = [hit for path in sorted((REPO / "metamorph").rglob("*.py")) for hit in library_imports_above(path)]
    assert found == []


def test_no_code_or_file_written_for_users_names_an_issue_or_this_machine():
    """Comments and docstrings describe the code: no tracker reference and no measured machine (the
    pattern below) in code, configuration or data files; docs/ states measurements with their machine."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    kinds = (".py", ".json", ".yaml", ".yml", ".sql", ".sh", ".toml", ".cfg")
    files = [f for f in tracked.split() if f.endswith(kinds) or f in ("Makefile", "Containerfile")]
    pattern = re.compile(r"\bissues? #\d+|\b(?:2|two)[- ]cores?\b", re.IGNORECASE)
    found = [
        f"{f}:{n}: {m.group(0)}"
        for f in files
        if not f.startswith("docs/")
        for n, line in enumerate((REPO / f).read_text(encoding="utf-8").splitlines(), 1)
        if (m := pattern.search(line))
    ]
    assert found == []
