"""``metamorph partitions`` on an instance no run has added a model partition to, and on a
DAGSTER_HOME that does not exist (listing creates nothing)."""

from __future__ import annotations

import pytest


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """A registry of one model ``m1`` as METAMORPH_MODELS; METAMORPH_HOME and DAGSTER_HOME under ``tmp_path``, absent."""
    reg = tmp_path / "models.yaml"
    reg.write_text("models:\n  - {id: m1, provider: openai_compatible, model: x, base_url: 'http://127.0.0.1:9/v1'}\n")
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    return reg


def test_an_instance_without_model_partitions_says_so(tmp_path, registry, capsys):
    from metamorph.cli import main
    from pipelines.instance import ensure_dagster_home, open_instance

    ensure_dagster_home()
    open_instance()  # its storage created, as a run creates it
    assert main(["partitions"]) == 0
    out = capsys.readouterr().out
    assert out == (
        f"no model partitions in the instance {tmp_path / 'dh'} (metamorph run adds one per model it evaluates)\n"
    )


def test_a_dagster_home_that_does_not_exist_is_listed_as_none_and_not_created(tmp_path, registry, monkeypatch, capsys):
    """Listing says there is no instance (exit 0, as for an instance without partitions); removing
    names the key that is not a partition (exit 2); neither creates DAGSTER_HOME or METAMORPH_HOME,
    given or the default ``<METAMORPH_HOME>/dagster_home``."""
    from metamorph.cli import main

    assert main(["partitions"]) == 0
    assert capsys.readouterr().out == (
        f"no Dagster instance at {tmp_path / 'dh'} (metamorph run creates it and adds one partition per model "
        "it evaluates)\n"
    )
    assert main(["partitions", "--remove", "typo"]) == 2
    assert capsys.readouterr().err == (
        f"error: --remove 'typo': not a model partition (no Dagster instance at {tmp_path / 'dh'})\n"
    )
    monkeypatch.delenv("DAGSTER_HOME")
    assert main(["partitions"]) == 0
    assert capsys.readouterr().out.startswith(f"no Dagster instance at {tmp_path / 'home' / 'dagster_home'} (")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.yaml"]


def test_a_dagster_home_that_is_a_file_is_one_line_and_exit_2(tmp_path, registry, monkeypatch, capsys):
    from metamorph.cli import main

    (tmp_path / "dh").write_text("not a directory")
    assert main(["partitions"]) == 2
    assert capsys.readouterr().err == (
        f"error: DAGSTER_HOME {tmp_path / 'dh'}: {tmp_path / 'dh'} is not a directory; set DAGSTER_HOME to a directory\n"
    )
    assert (tmp_path / "dh").read_text() == "not a directory"
