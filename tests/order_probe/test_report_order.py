"""The printed recovery table of OrderProbe (report.py) on a small synthetic warehouse: the chance
baseline and the truncation share, counted by hand."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from metamorph.studies.order_probe import report


def test_recovery_section_prints_chance_and_the_truncated_share(tmp_path):
    # scrambled replies: zh_cn 4 (1 cut at max_tokens), ja 2 (1 cut); the unperturbed reply is not counted
    replies = pd.DataFrame(
        {
            "model_id": "m",
            "setting": "zero_shot",
            "language": ["zh_cn"] * 4 + ["ja"] * 2 + ["ja"],
            "input_kind": ["scrambled"] * 6 + ["unperturbed"],
            "finish_reason": ["length", "stop", "stop", None, "length", "stop", "length"],
            "reason": "ok",
        }
    )
    rates = pd.DataFrame(
        {
            "model_id": "m",
            "setting": "zero_shot",
            "language": ["ja", "all", "zh_cn"],
            "n_items": [1, 2, 1],
            "n_inputs": [2, 6, 4],
            "recovery_pct": [50.0, 100 / 6, 0.0],
            "ci_low_pct": None,
            "ci_high_pct": None,
            "unperturbed_recovery_pct": [100.0, 50.0, 0.0],
            "parse_failure_pct": [0.0, 0.0, 0.0],
            "n_dropped_equal": 0,
            "n_dropped_duplicate": 0,
            "n_call_errors": 0,
            "not_measurable": None,
        }
    )
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.execute("CREATE SCHEMA order_probe")
    for name, df in (("scored_replies", replies), ("recovery_rates", rates)):
        con.register("df", df)
        con.execute(f"CREATE TABLE order_probe.{name} AS SELECT * FROM df")
    title, query = report.SECTIONS[0]
    assert report.CHANCE_RECOVERY_PCT == pytest.approx(4.1667, abs=1e-4)
    assert "chance = 4.17%" in title and "truncated_pct = replies cut at max_tokens" in title
    got = con.execute(query).df()
    assert got[["language", "recovery_pct", "truncated_pct"]].values.tolist() == [
        ["all", "16.67", 33.3],
        ["ja", "50.0", 50.0],
        ["zh_cn", "0.0", 25.0],
    ]
    con.close()
