"""What the Dagster UI shows: plain-text descriptions, previews that show text literally, worst
cells with the rows behind them, headline floats and the metric checks (assets/_common.py,
assets/_cells.py). Markdown is parsed with markdown-it-py (CommonMark + GFM tables, a dependency of
rich, hence of dagster) the way the UI's react-markdown does: raw HTML is dropped."""

from __future__ import annotations

import re

import dagster as dg
import duckdb
import pandas as pd
import pandera.pandas as pa
from dagster_duckdb import DuckDBResource
from markdown_it import MarkdownIt
from pandera.typing.pandas import Series

from assets._cells import (
    Behind,
    Cells,
    ViewPreview,
    check_results,
    headline_keys,
    headline_metadata,
    metric_checks,
    worst_cells_metadata,
)
from assets._common import md_text, preview_md, rounded_metadata, schema_md, table_px, validated_output
from pipelines.definitions import defs

SPHINX_ROLE = re.compile(r":[a-z]+:`")
HTML_TAG = re.compile(r"<[A-Za-z/!][^>]*>")  # dropped by the UI's markdown renderer


def table_cells(markdown: str) -> list[list[str]]:
    """The rows of the first GFM table in ``markdown`` as the UI shows them (raw HTML dropped)."""
    rows, row = [], None
    for tok in MarkdownIt("commonmark", {"html": True}).enable("table").parse(markdown):
        if tok.type == "tr_open":
            row = []
        elif tok.type == "tr_close":
            rows.append(row)
        elif tok.type == "inline" and row is not None:
            row.append("".join(c.content for c in tok.children if c.type != "html_inline"))
    return rows


def test_every_asset_and_check_description_is_plain_text():
    graph = defs.resolve_asset_graph()
    texts = {k.to_user_string(): graph.get(k).description or "" for k in graph.get_all_asset_keys()}
    texts.update(
        {
            f"{k.asset_key.to_user_string()}:{k.name}": graph.get_check_spec(k).description or ""
            for k in graph.asset_check_keys
        }
    )
    assert len(texts) > 150
    for name, text in texts.items():
        assert not SPHINX_ROLE.search(text), (name, text)
        assert not HTML_TAG.search(text), (name, text)


def test_every_metric_asset_says_what_a_row_is_and_names_its_source():
    graph = defs.resolve_asset_graph()
    metric = {k.asset_key for k in graph.asset_check_keys if k.name == "rows_present"}
    assert len(metric) >= 38  # 18 format, 9 wrapper, 6 workflow, 5 order tables
    for key in metric:
        text = graph.get(key).description
        first = text.split(". ")[0]  # the first sentence says what a row is
        assert re.search(r"one row", first, re.I), (key, text)
        assert re.search(r"Source: [^.]*(§|Table|App\.|review)", text), (key, text)
        assert re.search(r"Code: metamorph\.studies\.\w+\.\w+\.\w+", text), (key, text)


def test_preview_shows_placeholders_pipes_newlines_and_stars_literally():
    frame = pd.DataFrame({"reply": ["<placeholder>", "a|b", "line 1\nline 2", "*x*"], "n": [1, 2, 3, 4]})
    md = preview_md(frame).value
    assert table_cells(md) == [
        ["reply", "n"],
        ["<placeholder>", "1"],
        ["a|b", "2"],
        ["line 1 ↵ line 2", "3"],
        ["*x*", "4"],
    ]
    # without escaping the renderer loses the placeholder, splits the pipe and ends the row early
    raw = frame.to_markdown(index=False)
    assert table_cells(raw)[1] == ["", "1"] and table_cells(raw)[2] == ["a", "b"]
    assert (
        md_text("back\\slash & `code` [link](x) #1 ~~s~~")
        == "back\\\\slash \\& \\`code\\` \\[link\\](x) \\#1 \\~\\~s\\~\\~"
    )


def test_column_descriptions_show_angle_brackets():
    class Model(pa.DataFrameModel):
        workflow_id: Series[str] = pa.Field(description="<model_id>/<ingestion path>, e.g. a|b")

    column = schema_md(Model).value.columns[0]
    rendered = MarkdownIt("commonmark", {"html": True}).parseInline(column.description)[0].children
    assert "".join(c.content for c in rendered if c.type != "html_inline") == "<model_id>/<ingestion path>, e.g. a|b"


# A small metric table and the per-row table behind it, as a study would have them.
CELLS = pd.DataFrame(
    {
        "workflow_id": ["w", "w", "w"],
        "relation": ["MR1", "MR2", "MR3"],
        "violation_pct": [50.0, 12.5, None],
        "ci_low_pct": [20.0, 0.0, None],
        "ci_high_pct": [80.0, 25.0, None],
    }
)
ROWS = pd.DataFrame(
    {
        "workflow_id": ["w"] * 4,
        "instance_id": ["a", "a", "b", "b"],
        "format": ["txt", "md"] * 2,
        "mr1": [True, True, False, False],
        "mr2": [False, False, True, True],
        "generation_key": ["k1", "k2", "k3", "k4"],
    }
)


def _flagged(rows, cell):
    return rows[rows[cell["relation"].lower()]]


MR = Cells(
    "violation_pct",
    ("workflow_id", "relation"),
    ci=("ci_low_pct", "ci_high_pct"),
    bounds=(0, 100),
    headline="M{relation[2]}_pct/{workflow_id}",
    n_worst=2,
    behind=Behind(lambda inputs: inputs["rows"], _flagged, show=("instance_id", "format"), table="generations"),
)


def warehouse_with_generations(tmp_path) -> DuckDBResource:
    db = str(tmp_path / "w.duckdb")
    con = duckdb.connect(db)
    con.execute("CREATE SCHEMA study")
    con.execute(
        "CREATE TABLE study.generations AS SELECT * FROM (VALUES ('k1', 'stop', 'A'), "
        "('k2', 'length', '{\"decision\": \"<placeholder>\"'), ('k3', 'stop', 'B'), ('k4', 'stop', 'B'), "
        "('k9', 'stop', 'unused')) AS t(generation_key, finish_reason, response_text)"
    )
    con.close()
    return DuckDBResource(database=db)


def test_worst_cells_list_the_rows_behind_them_with_their_raw_text(tmp_path):
    md = worst_cells_metadata(CELLS, MR, "study", {"rows": ROWS}, warehouse_with_generations(tmp_path))
    # workflow_id is "w" in both worst cells: said once in the heading, not in each row and entry name
    assert list(md) == [
        "worst_cells",
        "worst cell 1: MR1 = 50",
        "worst cell 1: MR1 = 50 (rows in full)",
        "worst cell 2: MR2 = 12.5",
        "worst cell 2: MR2 = 12.5 (rows in full)",
    ]
    assert md["worst_cells"].value.startswith("Worst 2 cell(s) by violation_pct (higher is worse), workflow_id = w;")
    assert table_cells(md["worst_cells"].value) == [
        ["relation", "violation_pct", "95% CI", "rows shown"],
        ["MR1", "50", "[20, 80]", "2 of 2"],
        ["MR2", "12.5", "[0, 25]", "2 of 2"],
    ]
    first = md["worst cell 1: MR1 = 50"].value
    # the raw text right after the columns naming the row, the generation key last
    assert [c.name for c in first.schema.columns] == [
        "instance_id",
        "format",
        "finish_reason",
        "response_text",
        "generation_key",
    ]
    assert [r.data for r in first.records] == [
        {"instance_id": "a", "format": "txt", "finish_reason": "stop", "response_text": "A", "generation_key": "k1"},
        {
            "instance_id": "a",
            "format": "md",
            "finish_reason": "length",
            "response_text": '{"decision": "<placeholder>"',
            "generation_key": "k2",
        },
    ]
    assert md["worst cell 1: MR1 = 50 (rows in full)"].value == [r.data for r in first.records]
    assert [r.data["generation_key"] for r in md["worst cell 2: MR2 = 12.5"].value.records] == ["k3", "k4"]


def test_a_worst_cell_table_shows_the_read_columns_only_and_cuts_long_values(tmp_path):
    """The value beside a metadata key is ~360 px at 1440 px: the table has only the columns a
    reader reads (Behind.first, short names), strings of at most Behind.cut characters; the JSON
    entry has every row and column whole."""
    key = "a3f9" * 16  # a 64-hex generation key
    reply = '{"decision": "refer", "evidence": ["the applicant\'s income is below the threshold"]}'
    db = str(tmp_path / "w.duckdb")
    con = duckdb.connect(db)
    con.execute("CREATE SCHEMA study")
    con.execute("CREATE TABLE study.generations (generation_key TEXT, finish_reason TEXT, response_text TEXT)")
    con.execute("INSERT INTO study.generations VALUES (?, 'stop', ?)", [key, reply])
    con.close()
    rows = pd.DataFrame(
        {
            "workflow_id": ["w"],
            "instance_id": ["construct-0-0000"],
            "format": ["txt"],
            "parse_status": ["ok"],
            "decision": ["refer"],
            "gold": ["approve"],
            "mr1": [True],
            "mr2": [False],
            "generation_key": [key],
        }
    )
    cells = Cells(
        MR.value,
        MR.keys,
        ci=MR.ci,
        n_worst=1,
        behind=Behind(
            lambda inputs: inputs["rows"],
            _flagged,
            show=("instance_id", "format", "parse_status", "decision", "gold"),
            table="generations",
            first=("instance_id", "decision", "gold", "response_text"),
            cut=20,
        ),
    )
    md = worst_cells_metadata(CELLS, cells, "study", {"rows": rows}, DuckDBResource(database=db))
    # one worst cell: all its key values in the heading, none in the entry name
    assert list(md) == ["worst_cells", "worst cell 1 = 50", "worst cell 1 = 50 (rows in full)"]
    assert table_cells(md["worst_cells"].value) == [
        ["violation_pct", "95% CI", "rows shown"],
        ["50", "[20, 80]", "1 of 1"],
    ]
    table = md["worst cell 1 = 50"].value
    # only the columns a reader reads, under short names; the others are in the JSON entry
    assert [c.name for c in table.schema.columns] == ["instance", "got / gold", "reply"]
    assert table.records[0].data == {
        "instance": "construct-0-0000",
        "got / gold": "refer / approve",
        "reply": '{"decision": "refer…',  # 19 characters and the cut mark
    }
    assert md["worst cell 1 = 50 (rows in full)"].value == [
        {
            "instance_id": "construct-0-0000",
            "format": "txt",
            "parse_status": "ok",
            "decision": "refer",
            "gold": "approve",
            "finish_reason": "stop",
            "response_text": reply,
            "generation_key": "a3f9a3f9a3f9a3f9…",  # 16 hex digits: a 64-hex run would not wrap in the pane
        }
    ]


def test_the_summary_says_how_many_rows_each_entry_shows(tmp_path):
    many = Cells(
        MR.value,
        MR.keys,
        ci=MR.ci,
        bounds=MR.bounds,
        n_worst=1,
        behind=Behind(
            lambda inputs: inputs["rows"], _flagged, show=("instance_id", "format"), table="generations", limit=1
        ),
    )
    md = worst_cells_metadata(CELLS, many, "study", {"rows": ROWS}, warehouse_with_generations(tmp_path))
    assert table_cells(md["worst_cells"].value)[1][-1] == "1 of 2"  # 2 rows behind MR1, the entry shows 1
    assert len(md["worst cell 1 = 50"].value.records) == 1


def test_a_cell_at_its_best_possible_value_is_not_a_worst_cell(tmp_path):
    # MR2 at 0 violations is not "worst" although it is the second highest defined cell
    zero = CELLS.assign(violation_pct=[50.0, 0.0, None], ci_low_pct=[20.0, 0.0, None])
    md = worst_cells_metadata(zero, MR, "study", {"rows": ROWS}, warehouse_with_generations(tmp_path))
    assert list(md) == ["worst_cells", "worst cell 1 = 50", "worst cell 1 = 50 (rows in full)"]
    none_bad = CELLS.assign(violation_pct=[0.0, 0.0, None])
    assert (
        worst_cells_metadata(none_bad, MR, "study").get("worst_cells").value
        == "_every cell is at its best possible value (0): no worst cell_"
    )
    # lower is worse: 100% accuracy is the best value
    acc = Cells("acc", ("w",), worse="low", bounds=(0, 100))
    md = worst_cells_metadata(pd.DataFrame({"w": ["a", "b", "c"], "acc": [100.0, 40.0, 70.0]}), acc, "study")
    assert table_cells(md["worst_cells"].value)[1:] == [["b", "40"], ["c", "70"]]


def test_a_missing_raw_table_is_said_not_hidden(tmp_path):
    db = str(tmp_path / "empty.duckdb")
    duckdb.connect(db).close()
    md = worst_cells_metadata(CELLS, MR, "study", {"rows": ROWS}, DuckDBResource(database=db))
    assert "raw text not joined: CatalogException" in md["worst_cells"].value
    assert [r.data for r in md["worst cell 1: MR1 = 50"].value.records][0] == {
        "instance_id": "a",
        "format": "txt",
        "generation_key": "k1",
    }


def test_headline_floats_have_short_keys_and_the_cells_and_cis_are_one_json_entry():
    # one workflow: its name is in every key alike, so the keys are the metric's alone
    assert headline_metadata(CELLS.assign(violation_pct=[50.0, 12.3456, None]), MR) == {
        "M1_pct": dg.MetadataValue.float(50.0),
        "M2_pct": dg.MetadataValue.float(12.3),
        "headline": dg.MetadataValue.json(
            {
                "M1_pct": {"cell": "M1_pct/w", "value": 50.0, "ci_low": 20.0, "ci_high": 80.0},
                "M2_pct": {"cell": "M2_pct/w", "value": 12.3, "ci_low": 0.0, "ci_high": 25.0},
            }
        ),
    }
    # what differs between cells stays in the key; a part every cell shares goes
    names = ["M1_pct/smollm2/inline/construct", "M1_pct/gemma3/inline/construct"]
    assert headline_keys(names) == ["M1_pct/smollm2", "M1_pct/gemma3"]
    assert headline_keys(["acc/a/x", "acc/b/y", "acc/a/y"]) == ["acc/a/x", "acc/b/y", "acc/a/y"]
    assert headline_keys(["acc/a/b", "acc/c"]) == ["acc/a/b", "acc/c"]  # unlike shapes are kept whole


def test_checks_flag_empty_tables_undefined_cells_bad_cis_and_out_of_range_values():
    assert [s.name for s in metric_checks("study", "t", MR)] == [
        "rows_present",
        "value_defined",
        "ci_brackets_value",
        "value_in_range",
    ]
    ok = {r.check_name: r.passed for r in check_results(CELLS.iloc[:2], MR)}
    assert ok == {"rows_present": True, "value_defined": True, "ci_brackets_value": True, "value_in_range": True}
    bad = CELLS.assign(ci_low_pct=[60.0, 0.0, None], ci_high_pct=[80.0, 125.0, None])
    res = {r.check_name: r for r in check_results(bad, MR)}
    assert {k: r.passed for k, r in res.items()} == {
        "rows_present": True,
        "value_defined": False,
        "ci_brackets_value": False,
        "value_in_range": False,
    }
    assert res["value_defined"].severity == dg.AssetCheckSeverity.WARN
    assert res["value_defined"].metadata["undefined_cells"].value == 1
    assert res["ci_brackets_value"].metadata["violations"].value == 1  # 60 > 50
    assert res["value_in_range"].metadata["violations"].value == 1  # CI high 125
    empty = {r.check_name: r.passed for r in check_results(CELLS.head(0), None)}
    assert empty == {"rows_present": False}


def test_the_lineage_view_preview_selects_the_worst_cells_rows(tmp_path):
    wh = warehouse_with_generations(tmp_path)
    with wh.get_connection() as con:
        con.register("cells", CELLS)
        con.register("rows", ROWS)
        con.execute("CREATE TABLE study.rates AS SELECT * FROM cells")
        con.execute("CREATE TABLE study.rows AS SELECT * FROM rows")
        con.execute(
            "CREATE VIEW study.lineage AS SELECT r.*, g.response_text FROM study.rows r "
            "JOIN study.generations g USING (generation_key)"
        )
        md = ViewPreview(
            "lineage",
            "rates",
            MR,
            where=lambda cell: cell["relation"].lower(),
            columns=("instance_id", "format", "response_text"),
            order=("instance_id", "format DESC"),
        ).metadata(con, "study")
    assert md["worst_cell"].value == "rates: w · MR1 = 50"
    assert md["worst_cell_rows"].value == 2
    # a code block does not wrap: the SQL is laid out in lines of at most SQL_LINE_CHARS (40)
    assert md["worst_cell_sql"].value.splitlines() == [
        "```sql",
        'SELECT "instance_id", "format",',
        '  "response_text"',
        "FROM study.lineage",
        "WHERE \"workflow_id\" = 'w'",
        "  AND mr1",
        "ORDER BY instance_id, format DESC;",
        "```",
    ]
    assert [r.data for r in md["lineage (worst cell)"].value.records] == [
        {"instance_id": "a", "format": "txt", "response_text": "A"},
        {"instance_id": "a", "format": "md", "response_text": '{"decision": "<placeholder>"'},
    ]


def _defined_at(path: str):
    """The object named by the dotted ``path`` when it is defined there (a module, or a function or
    class whose ``__module__.__qualname__`` is ``path``), else None (missing, or imported from elsewhere)."""
    import importlib

    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        for attr in parts[n:]:
            obj = getattr(obj, attr, None)
        if obj is None:
            return None
        if n == len(parts):
            return obj
        own = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
        return obj if own == path else None
    return None


def test_every_code_pointer_names_the_function_where_it_is_defined():
    # metric tables derive theirs (assets._common.metric_table); the hand-written assets' typed ones must not drift
    graph = defs.resolve_asset_graph()
    named = {}
    for key in graph.get_all_asset_keys():
        for path in re.findall(r"\bmetamorph(?:\.\w+)+", graph.get(key).description or ""):
            named.setdefault(path.rstrip("."), key.to_user_string())
    assert len(named) > 60
    assert sorted(p for p in named if _defined_at(p) is None) == []


def _declared_behinds() -> dict[str, Behind]:
    """Every worst-cell table the studies declare: ``<module>.<Cells name>`` -> its Behind."""
    import importlib

    from metamorph.study import studies

    found = {}
    for study, declared in studies().items():
        module = importlib.import_module(declared.assets_module)
        for name, value in vars(module).items():
            if isinstance(value, Cells) and value.behind is not None:
                found[f"{study}.{name}"] = value.behind
    return found


def test_every_studys_worst_cell_tables_put_ids_answer_gold_and_raw_reply_first():
    """Each study's rows behind a worst cell open with the columns a reader reads: its ids, the
    extracted answer, the gold and the raw reply (the variant's text in WorkflowPerturb), each of
    them a column the table really shows."""
    expected = {
        "format_robustness": ("instance_id", "format", "repeat", "decision", "gold", "response_text"),
        "wrapper_sensitivity": ("item_id", "wrapper", "seed", "value", "gold", "response_text"),
        "order_probe": ("item_id", "pattern", "scrambled", "expression", "canonical", "response_text"),
        "workflow_perturb": ("variant_id", "golden_id", "severity", "score", "workflow_text"),
    }
    behinds = _declared_behinds()
    assert {name.split(".")[0] for name in behinds} == set(expected)
    for name, behind in behinds.items():
        assert behind.first == expected[name.split(".")[0]], name
        shown = {*behind.show, *behind.text} if behind.table else set(behind.show)
        assert [c for c in behind.first if c not in shown] == [], name


def test_float_metadata_is_rounded_for_display_one_decimal_for_percentages():
    """Every float shown as metadata goes through validated_output: a percentage (a ``pct``/``pp``
    word or ``%`` in its key, as every report card cell is) with one decimal, any other float with
    4 significant digits; ints, text and NaN are left as they are."""

    class T(pa.DataFrameModel):
        x: Series[int]

    md = {
        "M1_pct/smollm2/inline/construct": dg.MetadataValue.float(30.555555555555554),
        "sen_pp": dg.MetadataValue.float(-2.25001),
        "share %": dg.MetadataValue.float(99.96),
        "p_value": dg.MetadataValue.float(0.012345678),
        "rho": dg.MetadataValue.float(1 / 3),
        "est_cost_usd": dg.MetadataValue.float(0.000123456),
        "step": dg.MetadataValue.float(float("nan")),
        "calls": dg.MetadataValue.int(7),
        "note": dg.MetadataValue.text("30.555555555555554"),
    }
    out = validated_output(T, pd.DataFrame({"x": [1]}), "t", md).metadata
    assert {k: out[k].value for k in ("M1_pct/smollm2/inline/construct", "sen_pp", "share %", "p_value", "rho")} == {
        "M1_pct/smollm2/inline/construct": 30.6,
        "sen_pp": -2.3,
        "share %": 100.0,
        "p_value": 0.01235,
        "rho": 0.3333,
    }
    assert out["est_cost_usd"].value == 0.0001235 and out["step"].value != out["step"].value
    assert (out["calls"], out["note"]) == (md["calls"], md["note"])
    assert rounded_metadata({"cand · format_robustness · M1": dg.MetadataValue.float(1 / 3)}) == {
        "cand · format_robustness · M1": dg.MetadataValue.float(0.3333)
    }


def test_a_preview_fits_under_the_length_the_ui_renders_in_place():
    """The UI renders a markdown value in place only below 1,000 characters; a preview fits it:
    fewer rows, then narrower cells, then fewer columns (said in a last line)."""
    # two columns of 100 characters of words (they wrap): cut to 80, a row is 2 + 80 + 3 + 80 + 2 =
    # 167 characters and the header and rule 9 each, so 9 + 1 + 9 + 5 × 168 = 859 (6 rows: 1,027)
    words = {"t": ["xxxx " * 20] * 10, "u": ["yyyy " * 20] * 10}
    v = preview_md(pd.DataFrame(words)).value
    assert v.splitlines() == ["| t | u |", "|---|---|", *[f"| {('xxxx ' * 16)[:79]}… | {('yyyy ' * 16)[:79]}… |"] * 5]
    assert len(v) == 859


def test_a_preview_fits_the_width_of_the_metadata_pane():
    """Beside its key at 1,440 px a value is VALUE_PX = 360 px wide: a preview's columns are cut,
    then left out, until their narrowest layout fits (a 12-character run is 12 × 7.5 + 16 = 106 px:
    three columns, 318 px; four would be 424)."""
    v = preview_md(pd.DataFrame({f"c{i}": ["v" * 100] * 20 for i in range(10)})).value
    lines = v.splitlines()
    assert lines[0] == "| c0 | c1 | c2 |"
    assert lines[2:12] == ["| " + " | ".join(["v" * 11 + "…"] * 3) + " |"] * 10
    assert lines[-1] == "_3 of 10 columns shown (the table holds them all)_"
    assert table_px(pd.DataFrame({f"c{i}": ["v" * 100] for i in range(3)}), 12) == 318.0
    # a long column name is not cut: it alone can leave out every column after it
    v = preview_md(pd.DataFrame({"a" * 45: [1], "b": [2]})).value  # 353.5 + 23.5 px
    assert v.splitlines()[-1] == "_1 of 2 columns shown (the table holds them all)_"


def test_a_preview_counts_characters_as_javascript_does():
    # a character outside the BMP counts two (JavaScript string length)
    v = preview_md(pd.DataFrame({"t": ["😀" * 100] * 10})).value
    assert len(v.encode("utf-16-le")) // 2 < 1000


def test_an_inline_figure_fits_the_pane_with_text_of_at_least_10_px(tmp_path, monkeypatch):
    """The report card's trend and headline figures (two models, two studies, three metrics, two
    versions), a bar chart of four formats and the FDS heatmap: the inline PNG is at most INLINE_MAX_PX wide — the UI
    shows an image at its pixel size — and its smallest text is 10 px or more."""
    import matplotlib.pyplot as plt

    from assets import plots
    from assets._common import INLINE_MAX_PX, inline_png
    from metamorph.report_card import trend_series

    card = pd.DataFrame(
        [
            {
                "model_id": m,
                "study": s,
                "metric": metric,
                "slice": "ingestion=inline",
                "unit": "%",
                "value": 50.0,
                "ci_low": 25.0,
                "ci_high": 75.0,
                "version": v,
                "recorded_at": pd.Timestamp(f"2026-01-0{i + 1}"),
                "is_current": i == 1,
            }
            for m in ("stub", "cand")
            for s in ("format_robustness", "order_probe")
            for metric in ("M1", "M2", "accuracy")
            for i, v in enumerate(("aaaaaaaa1", "bbbbbbbb2"))
        ]
    )
    by_format = pd.DataFrame(
        {"workflow_id": "stub/inline", "dataset": "construct", "format": ["txt", "md", "json", "csv"], "v": 50.0}
    )
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path))
    shown = {
        "trend": plots.report_card_trends(trend_series(card)).value,
        "by study": plots.report_card_by_study(card).value,
        "bars": plots.bars_by_format(by_format, "v", "bars", ("txt", "md", "json", "csv")).value,
        "fds": plots.fds_heatmap(
            pd.DataFrame(
                [
                    {"workflow_id": "stub/inline", "dataset": "construct", "factor": f, "format": fmt, "fds": 0.5}
                    for f in ("age_group", "sex")
                    for fmt in ("txt", "md", "json", "csv")
                ]
            ),
            ("txt", "md", "json", "csv"),
        ).value,
    }
    widths = {}
    for name, md in shown.items():
        inline = re.fullmatch(r"\[!\[[^\]]*\]\(http://[^/]+/([0-9a-f]{16}\.png)\)\]\(http://[^)]+\)", md).group(1)
        widths[name] = int.from_bytes((tmp_path / "figures" / inline).read_bytes()[16:20], "big")
    assert {k: w <= INLINE_MAX_PX for k, w in widths.items()} == dict.fromkeys(shown, True), widths
    fig = plots.report_card_trends_figure(trend_series(card))
    assert inline_png(fig)[1] >= 10
    plt.close(fig)


def test_sql_in_a_code_block_is_laid_out_in_lines_that_fit_the_pane():
    """The lineage assets' worst_cell_sql was one line in a code block (which never wraps): 3,411 px
    wide beside a 360 px value. Each clause starts a line, a body is filled to 40 characters, a
    quoted literal (spaces and all) is never split, and one longer than a line has its own."""
    from assets._cells import SQL_LINE_CHARS, sql_lines

    text = sql_lines(
        [
            ("SELECT", '"model_id", "setting", "language", "item_id", "pattern", "scrambled"'),
            ("FROM", "order_probe.recovery_cell_lineage"),
            ("WHERE", "\"slice\" = 'ingestion=inline, dataset=construct'"),
            ("  AND", "NOT correct AND reason <> 'call_error'"),
            ("ORDER BY", "item_id"),
        ]
    )
    assert text.splitlines() == [
        'SELECT "model_id", "setting",',  # 29 characters; with ' "language",' 41
        '  "language", "item_id", "pattern",',
        '  "scrambled"',
        "FROM order_probe.recovery_cell_lineage",
        'WHERE "slice" =',
        "  'ingestion=inline, dataset=construct'",
        "  AND NOT correct AND reason <>",
        "    'call_error'",
        "ORDER BY item_id",
    ]
    assert SQL_LINE_CHARS == 40


def _widest_run_px(value) -> float:
    """The widest unbreakable run of a text or JSON entry as the UI shows it (JSON as the UI's
    JSON.stringify of Python's json.dumps: wrapped at spaces), at CHAR_PX a character."""
    import json

    from assets._common import CELL_PAD_PX, CHAR_PX

    text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return max(len(w) for w in text.split()) * CHAR_PX + CELL_PAD_PX


def test_a_generation_assets_fingerprint_and_cost_plan_fit_the_pane(tmp_path):
    """workflow_generations' registry_fingerprint (64 hex digits in one run, 496 px) pushed its
    value column past the pane, and cost_plan with it. The fingerprint is four groups of 16 digits
    (read back whole by the registry sensor), and no text or JSON entry has a run wider than the
    value's 360 px."""
    from assets._common import VALUE_PX, fingerprint_of, generation_metadata
    from assets.evaluations import latest_evaluation
    from metamorph.costplan import METHOD_ESTIMATE, CostPlan
    from metamorph.models import Price
    from metamorph.models import load_registry
    from metamorph.runner import RunStats

    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n  - id: api\n    provider: openai_compatible\n    model: gpt-x\n"
        "    base_url: http://127.0.0.1:9/v1\n    api_key_env: K\n"
    )
    [spec] = load_registry(str(reg))
    fp = spec.fingerprint()
    df = pd.DataFrame(
        {
            "error": [None, "boom"],
            "finish_reason": ["stop", "length"],
            "model_version": ["v1", "v1"],
            "format": ["a", "b"],
        }
    )
    plan = CostPlan("api", "openai_compatible", 2, 0, 2, 100, 64, METHOD_ESTIMATE, Price(0.5, 1.5), label="gen")
    md = generation_metadata(df, RunStats(total=2, done=2, calls=2), spec, by="format", plan=plan)
    assert md["registry_fingerprint"].value == " ".join([fp[:16], fp[16:32], fp[32:48], fp[48:]])
    assert fingerprint_of(md["registry_fingerprint"].value) == fp
    wide = {
        k: _widest_run_px(v.value)
        for k, v in md.items()
        if isinstance(v, (dg.TextMetadataValue, dg.JsonMetadataValue)) and _widest_run_px(v.value) > VALUE_PX
    }
    assert wide == {}
    assert {"registry_fingerprint", "cost_plan"} <= set(md)
    # the registry sensor and the report card read the fingerprint back whole
    with dg.instance_for_test() as instance:
        key = dg.AssetKey(["format_robustness", "workflow_generations"])
        instance.add_dynamic_partitions("model", ["api"])
        instance.report_runless_asset_event(
            dg.AssetMaterialization(key, partition="api", metadata={"registry_fingerprint": md["registry_fingerprint"]})
        )
        assert latest_evaluation(instance, "format_robustness", "api").fingerprint == fp
