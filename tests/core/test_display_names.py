"""Names as the Dagster UI shows them: a user tells every asset, op and partition apart without hovering.

The UI cuts a long name in the middle (ui-components ``MiddleTruncate``: the head and the tail that
fit the box, joined by "…"). The widths below were measured in Chromium on the project's own UI at
a 1440 px wide window with the navigation shown (Dagster 1.13.27): the fewest characters kept on
each side of the "…" anywhere on that surface.

- Catalog, flat view: ``group / name`` in the asset-name column, 13 + 13 characters (rows with two
  kind badges, e.g. ``format_robust…acy_by_format``). The tail is what tells two assets of a group
  apart, so a variant of a table is named by a suffix (``perturbations`` / ``perturbations_llm``;
  as ``llm_perturbations`` both showed as ``workflow_pert…perturbations``).
- Partition chip and the partition picker of a model job: 7 + 7 characters (the registry id
  ``smollm2-135m-instruct`` showed as ``smollm2…nstruct``, which could not be told from the
  ``smollm2-135m-instruct-t07`` entry): registry ids must fit whole, 15 characters at most.
- Job graph of a study's job, zoomed to fit: op labels (the asset's name) 5 + 7 characters. (Dagster's
  implicit asset job, holding every study's ``lineage_views``, has no graph page of its own.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipelines.definitions import defs

ROOT = Path(__file__).resolve().parents[2]


def middle_truncate(text: str, head: int, tail: int) -> str:
    """``text`` as the UI shows it in a box that holds ``head + tail`` characters around "…"."""
    return text if len(text) <= head + tail + 1 else f"{text[:head]}…{text[-tail:]}"


def test_middle_truncate_keeps_head_and_tail():
    assert middle_truncate("format_robustness / accuracy_by_format", 13, 13) == "format_robust…acy_by_format"
    assert middle_truncate("smollm2-135m-instruct", 7, 7) == "smollm2…nstruct"
    assert middle_truncate("smollm2-greedy", 7, 7) == "smollm2-greedy"


def asset_keys() -> list[list[str]]:
    return sorted(k.path for k in defs.resolve_asset_graph().get_all_asset_keys())


def test_every_asset_is_told_apart_in_the_catalog():
    shown = {}
    for path in asset_keys():
        shown.setdefault(middle_truncate(" / ".join(path), 13, 13), []).append("/".join(path))
    assert {s: keys for s, keys in shown.items() if len(keys) > 1} == {}


@pytest.mark.parametrize(
    "registry", ["config/models.yaml", "config/models.example-apis.yaml"], ids=["shipped", "example-apis"]
)
def test_every_registry_id_fits_the_partition_chip_whole(registry):
    ids = [m["id"] for m in yaml.safe_load((ROOT / registry).read_text())["models"]]
    assert [i for i in ids if middle_truncate(i, 7, 7) != i] == []


def test_the_old_registry_ids_would_not_fit():
    """The names the issue saw: cut to the same head, told apart only by hovering."""
    old = ["smollm2-135m-instruct", "smollm2-135m-instruct-t07"]
    assert [middle_truncate(i, 7, 7) for i in old] == ["smollm2…nstruct", "smollm2…uct-t07"]


def test_every_op_of_a_job_is_told_apart_in_its_graph():
    clashes = {}
    for job in defs.resolve_all_job_defs():
        if job.name.startswith("__"):
            continue
        shown = {}
        for node in job.graph.node_defs:
            label = node.name.split("__")[-1]
            shown.setdefault(middle_truncate(label, 5, 7), []).append(node.name)
        clashes.update({f"{job.name}: {s}": n for s, n in shown.items() if len(n) > 1})
    assert clashes == {}
