"""The printed wrapper table of the wrapper study (report.py) on a small synthetic warehouse:
accuracy beside chance and the truncation share, read from wrapper_cells (mode paper only)."""

from __future__ import annotations

import duckdb
import pandas as pd

from metamorph.studies.wrapper_sensitivity import metrics as wm
from metamorph.studies.wrapper_sensitivity import report


def test_wrapper_section_prints_chance_and_truncated_share(tmp_path):
    # (wrapper, correct, parseable, finish_reason) for 4 items of a 4-option choice task, mode paper;
    # plain: 3 right, 1 cut -> A 75, trunc 25; json: 1 right, 2 cut -> A 25, trunc 50; chance 100/4 = 25;
    # deliberate: every call failed at the provider -> no number, the reason
    rows = [
        ("plain", True, True, "stop"),
        ("plain", True, True, "stop"),
        ("plain", True, True, "stop"),
        ("plain", False, False, "length"),
        ("json", True, True, "stop"),
        ("json", False, False, "length"),
        ("json", False, False, "length"),
        ("json", False, True, "stop"),
    ] + [("deliberate", False, False, None)] * 4
    scored = pd.DataFrame(
        [
            {
                "model_id": "m",
                "task": "t",
                "answer_type": "choice",
                "n_choices": 4,
                "wrapper": w,
                "mode": "paper",
                "item_id": f"i{i % 4}",
                "seed": 0,
                "correct": c,
                "parseable": p,
                "finish_reason": f,
                "prompt_tokens": 10,
                "reason": "call_error" if w == "deliberate" else "ok" if p else "no_answer",
            }
            for i, (w, c, p, f) in enumerate(rows)
        ]
    )
    cells = wm.cell_metrics(scored, "paper")
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.execute("CREATE SCHEMA wrapper_sensitivity")
    con.register("df", cells)
    con.execute("CREATE TABLE wrapper_sensitivity.wrapper_cells AS SELECT * FROM df")
    title, query = report.SECTIONS[0]
    assert "chance_pct (the accuracy of guessing" in title and "truncated_pct (replies cut at max_tokens)" in title
    got = con.execute(query).df()
    got = got[["wrapper", "accuracy_pct", "chance_pct", "parseability_pct", "truncated_pct", "n", "call_errors"]]
    assert got.astype(object).where(got.notna(), None).values.tolist() == [
        ["deliberate", "not measurable: every call failed (4 of 4)", None, None, None, 0, 4],
        ["json", "25.0", 25.0, 50.0, 50.0, 4, 0],
        ["plain", "75.0", 25.0, 75.0, 25.0, 4, 0],
    ]
    con.close()
