"""The documentation site (mkdocs.yml, docs/) against the repository, without building it (`make docs`
builds it with warnings as errors): every library module has an API page, every page is in the nav
and every nav entry is a page, and the README stays a front door whose links into docs/ exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def nav_pages(entries) -> list[str]:
    """The page paths of a mkdocs nav (nested lists of {title: path-or-list})."""
    out: list[str] = []
    for entry in entries:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            out.extend(nav_pages(value) if isinstance(value, list) else [value])
    return out


def api_directives() -> dict[str, bool]:
    """``::: module`` directives of the API pages -> whether they render the module's submodules."""
    found: dict[str, bool] = {}
    for page in sorted((DOCS / "api").glob("*.md")):
        text = page.read_text()
        for m in re.finditer(r"^::: ([\w.]+)\n((?:    .*\n)*)", text, flags=re.M):
            found[m.group(1)] = found.get(m.group(1), False) or "show_submodules: true" in m.group(2)
    return found


def library_modules() -> list[str]:
    """Every module and package of ``metamorph`` (private modules ``_x.py`` left out, as on the pages)."""
    out = []
    for path in sorted((REPO / "metamorph").rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        parts = list(rel.parts[:-1]) if rel.name == "__init__" else list(rel.parts)
        if not any(p.startswith("_") for p in parts):
            out.append(".".join(parts))
    return out


def test_every_library_module_is_on_an_api_page():
    directives = api_directives()
    with_submodules = [name for name, sub in directives.items() if sub]

    def covered(module: str) -> bool:
        return module in directives or any(module.startswith(name + ".") for name in with_submodules)

    assert "metamorph.studies.format_robustness" in with_submodules  # a study page renders its package
    missing = [m for m in library_modules() if not covered(m)]
    # metamorph.studies is only the namespace of the study packages
    assert missing == ["metamorph.studies"], f"add a '::: <module>' line to a page of docs/api/: {missing}"


def test_every_study_package_has_its_own_api_page():
    studies = sorted(p.name for p in (REPO / "metamorph" / "studies").iterdir() if (p / "__init__.py").exists())
    assert len(studies) >= 4
    for study in studies:
        text = (DOCS / "api" / f"{study}.md").read_text()
        assert f"::: metamorph.studies.{study}\n    options:\n      show_submodules: true" in text, study


def test_the_nav_names_every_page_and_only_pages_that_exist():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    nav = nav_pages(config["nav"])
    assert len(nav) == len(set(nav))
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages
    assert config["strict"] is True


def test_the_readme_is_a_front_door_whose_links_into_docs_exist():
    text = (REPO / "README.md").read_text()
    assert len(text.encode()) <= 15 * 1024
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", text)
    assert "docs/running.md" in links and "docs/scaling-out.md" in links
    for link in links:
        assert (REPO / link).is_file(), link
    for command in ("make demo", "make test", "metamorph run", "metamorph plan", "--source", "make ui"):
        assert command in text, command


def test_definitions_lists_every_declared_resampling_unit():
    from metamorph.studies.format_robustness import report as fr
    from metamorph.studies.order_probe import report as op
    from metamorph.studies.workflow_perturb import report as wp
    from metamorph.studies.wrapper_sensitivity import report as ws

    declared = {
        (study, metric, tuple(cols))
        for study, mod in (
            ("format_robustness", fr),
            ("wrapper_sensitivity", ws),
            ("order_probe", op),
            ("workflow_perturb", wp),
        )
        for metric, cols in mod.RESAMPLING_UNITS.items()
    }
    text = (Path(__file__).resolve().parents[2] / "docs" / "definitions.md").read_text()
    table = text.split("| study | metric | resampling unit (columns of one cluster) |", 1)[1].split("\n\n", 1)[0]
    listed = set()
    for line in table.strip().splitlines()[1:]:
        study, metric, cols = (c.strip() for c in line.strip("|").split("|"))
        listed.add((study, metric, tuple(c.strip().strip("`") for c in cols.split(","))))
    assert listed == declared


def test_no_documented_command_reads_a_file_outside_the_clone():
    """A reader runs the commands of the README and docs/ from a clone: a ``--source`` (or any
    other path) such as ``../shared/datasets/…`` names a folder that exists on the machine the
    project was developed on, not on theirs; the samples are ``$DATASETS/<name>/sample.jsonl``."""
    pages = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
    outside = [
        f"{page.relative_to(REPO)}:{n}: {line.strip()}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), start=1)
        if ("metamorph" in line or "--source" in line) and re.search(r"(^|[\s:=])\.\./", line)
    ]
    assert outside == []


def test_every_make_target_the_docs_name_is_in_the_makefile():
    """A `make <target>` quoted in the README or a page (in backticks or a bash block) is a target of
    the Makefile: a new user types it as written."""
    targets = set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(), flags=re.M))
    named = {}
    for page in [REPO / "README.md", *sorted(DOCS.glob("**/*.md"))]:
        for target in re.findall(r"(?:`|^|\$ )make ([a-z][a-z-]*)", page.read_text(), flags=re.M):
            named.setdefault(target, page.relative_to(REPO).as_posix())
    assert {t: p for t, p in named.items() if t not in targets} == {}
