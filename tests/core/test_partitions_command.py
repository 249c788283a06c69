"""``metamorph partitions`` on an instance no run has added a model partition to."""

from __future__ import annotations


def test_an_instance_without_model_partitions_says_so(tmp_path, monkeypatch, capsys):
    from metamorph.cli import main

    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n  - {id: m1, provider: openai_compatible, model: x, base_url: 'http://127.0.0.1:9/v1'}\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    assert main(["partitions"]) == 0
    out = capsys.readouterr().out
    assert out == (
        f"no model partitions in the instance {tmp_path / 'dh'} (metamorph run adds one per model it evaluates)\n"
    )
