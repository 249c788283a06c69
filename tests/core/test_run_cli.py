"""``python -m pipelines.run`` on bad input: one line on stderr naming file and row, exit 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bad_jsonl_line_gives_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q"}\n{bad json\n', encoding="utf-8")
    env = {**os.environ, "METAMORPH_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh")}
    out = subprocess.run([sys.executable, "-m", "pipelines.run", "format_robustness", "--source", f"medqa:{bad}",
                          "--no-models"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"error: {bad}, row 2: not valid JSON "
                                               "(Expecting property name enclosed in double quotes; column 2)"]
    assert not (tmp_path / "home" / "metamorph.duckdb").exists()  # validated before any run was launched
