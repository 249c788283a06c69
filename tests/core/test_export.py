"""Exports people open: CSV cells cannot run as spreadsheet formulas (OWASP CSV injection), and
markdown previews show model output as typed instead of rendering it."""

from __future__ import annotations

import csv

import pandas as pd

from metamorph.export import markdown_cell, markdown_table, spreadsheet_cell, spreadsheet_safe, write_csv

HOSTILE = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "\tcmd", "\rcmd", "plain", "a=b", ""]


def test_every_formula_prefix_gets_an_apostrophe_and_nothing_else_changes():
    assert [spreadsheet_cell(v) for v in HOSTILE] == [
        '\'=HYPERLINK("http://x","y")',
        "'+1+1",
        "'-2+3",
        "'@SUM(A1)",
        "'\tcmd",
        "'\rcmd",
        "plain",
        "a=b",
        "",
    ]
    assert [spreadsheet_cell(v) for v in (-3, -0.5, None, True)] == [-3, -0.5, None, True]


def test_write_csv_neutralises_text_cells_and_column_names_and_keeps_numbers(tmp_path):
    df = pd.DataFrame({"reply": HOSTILE, "score": [-1.5] * len(HOSTILE), "=name": ["x"] * len(HOSTILE)})
    path = write_csv(df, tmp_path / "out.csv")
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["reply", "score", "'=name"]
    assert [r[0] for r in rows[1:]] == [spreadsheet_cell(v) for v in HOSTILE]
    assert {r[1] for r in rows[1:]} == {"-1.5"}  # a number is not text: no apostrophe
    assert list(df["reply"]) == HOSTILE and list(spreadsheet_safe(df)["score"]) == [-1.5] * len(HOSTILE)


def test_markdown_cells_escape_markup_html_and_table_breaks():
    assert markdown_cell("<img src=x onerror=alert(1)>") == "\\<img src=x onerror=alert(1)\\>"
    assert markdown_cell("![t](http://evil/p.png) a | b") == "\\!\\[t\\](http://evil/p.png) a \\| b"
    assert markdown_cell("line1\r\nline2\nline3") == "line1 ↵ line2 ↵ line3"
    assert markdown_cell("**bold** `code` &lt; \\") == "\\*\\*bold\\*\\* \\`code\\` \\&lt; \\\\"
    assert markdown_cell(0.5) == 0.5


def test_markdown_table_has_one_line_per_row_and_cuts_before_escaping():
    df = pd.DataFrame({"model_id": ["m"], "text": ["<script>x</script>\n| injected | row |"], "n": [3]})
    assert markdown_table(df).splitlines() == [  # the reply's newline and pipes add no row or column
        "| model\\_id   | text                                           |   n |",
        "|:------------|:-----------------------------------------------|----:|",
        "| m           | \\<script\\>x\\</script\\> ↵ \\| injected \\| row \\| |   3 |",
    ]
    assert markdown_table(pd.DataFrame({"t": ["<" * 10]}), max_chars=4).splitlines()[2] == "| \\<\\<\\<… |"
    assert markdown_table(pd.DataFrame({"t": []})) == "_(no rows)_"


def test_asset_previews_use_the_escaping_table():
    import dagster as dg

    from assets._common import preview_md

    md = preview_md(pd.DataFrame({"reply": ["<b>hi</b>"] * 12}), n=2)
    assert isinstance(md, dg.MarkdownMetadataValue)
    assert md.value.splitlines()[2:] == ["| \\<b\\>hi\\</b\\> |"] * 2


def test_markdown_table_shows_every_kind_of_missing_value_as_one_marker():
    import numpy as np

    df = pd.DataFrame(
        {"a": pd.array([1, None], dtype="Int64"), "b": [0.5, np.nan], "c": ["<x>", None], "d": [1.25, 2.5]}
    )
    assert markdown_table(df).splitlines() == [
        "| a   | b   | c     |    d |",
        "|:----|:----|:------|-----:|",
        "| 1   | 0.5 | \\<x\\> | 1.25 |",
        "| –   | –   | –     | 2.5  |",
    ]  # pandas alone prints <NA> (dropped by the UI as an HTML tag), nan and None
