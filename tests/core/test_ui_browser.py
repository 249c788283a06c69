"""The UI walk-through of docs/results.md in a real browser (headless Chromium, 1440×900, driven by
Playwright): a demo-like ``metamorph run`` of the format study (the construct dataset, 2 records,
k = 1, routing on) against a model on the local HTTP stub, then ``make ui`` (scripts/ui.sh) on that
instance, and the pages a user opens after ``make demo``:

* the Runs page and the Overview's timeline list the run's three runs under their jobs;
* an asset's page shows its markdown preview and its plot in place (no "[Show Markdown]");
* the report card is materialized by the run, and its Materialize launches without a warning;
* an asset's own launchpad refuses ``limit: 0`` with one line, and no run is created;
* every metadata entry of those pages (worst-cell rows, the report card, previews, figures) fits the
  asset page's metadata pane, and figures are shown at their natural width.

The stub answers "do not refer" when the document is the JSON rendering (it holds ``"age"``) and
"refer" otherwise, with the same evidence: on the two construct records (gold "refer" and "do not
refer") every instance flips between JSON and the other formats (M1 = 100 %), the evidence never
changes (M2 = 0 %), and each format is right on one record of two (accuracy 50 %)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.core.stub_http import Reply, StubServer, chat_completion
from tests.core.test_ui_process import _signals_as_from_a_terminal, descendants, free_port, graphql

pytestmark = pytest.mark.ui

REPO = Path(__file__).resolve().parents[2]
VIEWPORT = {"width": 1440, "height": 900}
JOBS = (
    "format_robustness_inputs_job",
    "format_robustness_model_job",
    "format_robustness_tables_job",
    "model_upgrades_job",
)
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "OPENAI_BASE_URL")
#: a page's first load compiles and fetches the asset graph: seconds when idle, a minute on a loaded machine
LOAD_MS = 180_000


def _reply(rec) -> Reply:
    text = rec.json["messages"][-1]["content"]
    decision = "do not refer" if '"age"' in text else "refer"
    body = chat_completion(json.dumps({"decision": decision, "evidence": ["patient has fever"]}), model="stub-model")
    return Reply(200, body)


@dataclass
class DemoUI:
    url: str
    port: int
    figures_url: str
    browser: object

    def page(self, path: str):
        """A new 1440×900 page at ``path`` of the UI."""
        page = self.browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(LOAD_MS)
        page.goto(self.url + path)
        return page

    def run_status(self, run_id: str) -> str:
        data = graphql(
            self.port, "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }", {"id": run_id}
        )
        return data["runOrError"]["status"]

    def runs(self) -> list[dict]:
        data = graphql(self.port, "{ runsOrError { ... on Runs { results { runId jobName status } } } }")
        return data["runsOrError"]["results"]


@pytest.fixture(scope="module")
def demo_ui(chromium, tmp_path_factory):
    """The run of the module docstring, then scripts/ui.sh on its instance and a headless Chromium."""
    from playwright.sync_api import sync_playwright

    tmp = tmp_path_factory.mktemp("demo_ui")
    figures_url = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    env.update(
        NO_PROXY="127.0.0.1,localhost",
        STUB_KEY="k",
        METAMORPH_MODELS=str(tmp / "models.yaml"),
        METAMORPH_HOME=str(tmp / "home"),
        DAGSTER_HOME=str(tmp / "dagster_home"),
        METAMORPH_FIGURES_URL=figures_url,
    )
    stub = StubServer()
    try:
        stub.script("POST", "/v1/chat/completions", _reply)
        (tmp / "models.yaml").write_text(
            "models:\n  - {id: stub, provider: openai_compatible, model: stub-model, "
            f"base_url: '{stub.url}/v1', api_key_env: STUB_KEY, max_concurrency: 2}}\n"
        )
        argv = ["format_robustness", "--limit", "2", "--k", "1", "--models", "stub"]
        out = subprocess.run(
            [sys.executable, "-m", "pipelines.run", *argv],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        # 2 records × 4 formats; routing re-runs the 6 non-txt documents as txt (2 are cache hits)
        assert len(stub.requests) == 14
    finally:
        stub.close()

    venv = Path(os.environ.get("METAMORPH_VENV") or Path(sys.executable).parent.parent)
    port = free_port()
    env.update(METAMORPH_VENV=str(venv), PORT=str(port), UI_STOP_TIMEOUT="60")
    log_out, log_err = open(tmp / "ui.out", "w"), open(tmp / "ui.err", "w")
    ui = subprocess.Popen(
        ["bash", "scripts/ui.sh"],
        cwd=REPO,
        env=env,
        stdout=log_out,
        stderr=log_err,
        start_new_session=True,
        preexec_fn=_signals_as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 600
        while graphql(port, "{ version }") is None:
            assert ui.poll() is None, (tmp / "ui.err").read_text()[-2000:]
            assert time.monotonic() < deadline, "the UI did not answer within 600 s"
            time.sleep(2)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True)
            try:
                yield DemoUI(f"http://127.0.0.1:{port}", port, figures_url, browser)
            finally:
                browser.close()
    finally:
        started = descendants(ui.pid)
        ui.send_signal(signal.SIGTERM)
        try:
            ui.wait(timeout=120)
        except subprocess.TimeoutExpired:
            for pid in descendants(ui.pid) | started | {ui.pid}:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        log_out.close()
        log_err.close()


def metadata_value(page, key: str):
    """The value cell of the asset's metadata entry ``key`` (Overview's Metadata table)."""
    row = page.locator("tr", has=page.locator("td:first-child", has_text=re.compile(rf"^\s*{re.escape(key)}\s*$")))
    return row.first.locator(":scope > td").nth(2)


def table_rows(table) -> list[list[str]]:
    """Every row of an HTML table as its cells' text (header row first)."""
    return table.evaluate(
        "t => Array.from(t.querySelectorAll('tr')).map(r => Array.from(r.children).map(c => c.innerText.trim()))"
    )


def right_edge(locator) -> float:
    box = locator.bounding_box()
    return box["x"] + box["width"]


def metadata_pane_right(page) -> float:
    """The right edge of the pane that shows the metadata table (it scrolls sideways past it)."""
    return right_edge(page.locator("[class*='AssetEventMetadataEntriesTable']").first)


def test_runs_page_and_overview_timeline_show_the_runs_of_the_run(demo_ui):
    runs = demo_ui.runs()
    assert sorted((r["jobName"], r["status"]) for r in runs) == [(job, "SUCCESS") for job in JOBS]
    page = demo_ui.page("/runs")
    try:
        page.get_by_text("model_upgrades_job").first.wait_for()
        body = page.inner_text("body")
        starts = sorted((body.index(r["runId"][:8]), r) for r in runs)
        for i, (start, run) in enumerate(starts):
            row = body[start : starts[i + 1][0] if i + 1 < len(starts) else len(body)]
            assert f"\n{run['jobName']}\nManually launched\nSuccess\n" in row, row
    finally:
        page.close()
    page = demo_ui.page("/overview/activity/timeline")
    try:
        page.get_by_role("link", name="model_upgrades_job").first.wait_for()
        body = page.inner_text("body")
        assert "No runs" not in body
        # the code location's row counts the four runs, then one row per job
        assert "\nmetamorph\n4\n" in body
        for job in JOBS:  # each job's row links to the job
            assert page.get_by_role("link", name=job).count() >= 1
    finally:
        page.close()


def test_an_asset_page_shows_its_preview_and_its_plot_in_place(demo_ui):
    page = demo_ui.page("/assets/format_robustness/accuracy_by_format")
    try:
        preview = metadata_value(page, "preview").locator("table")
        preview.wait_for()
        assert page.get_by_text("Show Markdown").count() == 0
        # the columns that fit the pane; the last line says how many the table holds
        assert table_rows(preview) == [
            ["workflow_id", "dataset", "format", "accuracy_pct"],
            *[["stub/inline", "construct", fmt, "50"] for fmt in ("txt", "md", "json", "csv")],
        ]
        assert metadata_value(page, "preview").inner_text().endswith("4 of 10 columns shown (the table holds them all)")
        plot = metadata_value(page, "plot").locator("img")
        plot.wait_for()
        assert plot.get_attribute("src").startswith(demo_ui.figures_url + "/")
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=plot.element_handle())
        assert plot.get_attribute("alt") == "Accuracy by format (%)"
    finally:
        page.close()


def test_the_report_card_is_materialized_by_the_run(demo_ui):
    page = demo_ui.page("/assets/model_upgrades/robustness_report_card")
    try:
        card = metadata_value(page, "report_card")
        card.locator("table").wait_for()
        body = page.inner_text("body")
        assert "Never materialized" not in body and "No metadata found" not in body
        assert re.fullmatch(r"stub · format_robustness · version [0-9a-f]{8}", card.locator("p").first.inner_text())
        assert table_rows(card.locator("table")) == [
            ["metric", "value [95% CI]", "Δ"],
            ["M1 (ingestion=inline)", "100.0 [100.0, 100.0]", "–"],
            ["M2 (ingestion=inline)", "0.0 [0.0, 0.0]", "–"],
            ["accuracy (ingestion=inline)", "50.0 [25.0, 75.0]", "–"],
        ]
        assert page.get_by_text("Show Markdown").count() == 0  # the preview and the card are shown in place
        # Materialize launches at once: no "Are you sure?" about the studies the run did not run
        before = {r["runId"] for r in demo_ui.runs()}
        page.locator("button").filter(has_text=re.compile(r"^Materialize$")).first.click()
        toast = page.get_by_text(re.compile(r"^Launched run [0-9a-f]{8}$")).first
        toast.wait_for()
        assert page.get_by_role("dialog").count() == 0
        [new] = [r for r in demo_ui.runs() if r["runId"] not in before]
        assert toast.inner_text() == f"Launched run {new['runId'][:8]}"
        deadline = time.monotonic() + 600  # the run's process loads the code location first
        while (status := demo_ui.run_status(new["runId"])) not in ("SUCCESS", "FAILURE", "CANCELED"):
            assert time.monotonic() < deadline, status
            time.sleep(2)
        assert (new["jobName"], status) == ("__ASSET_JOB", "SUCCESS")
    finally:
        page.close()


def test_the_asset_launchpad_refuses_limit_0_in_one_line_and_creates_no_run(demo_ui):
    before = len(demo_ui.runs())
    page = demo_ui.page("/assets/format_robustness/source_instances")
    try:
        buttons = page.locator("button")
        buttons.filter(has_text=re.compile(r"^Materialize$")).first.wait_for()
        buttons.nth(buttons.all_inner_texts().index("Materialize") + 1).click()  # ▾ beside Materialize
        page.get_by_role("menuitem", name="Open launchpad").click()
        editor = page.locator(".CodeMirror").first
        editor.wait_for()
        config = editor.evaluate("e => e.CodeMirror.getValue()")
        assert "      limit: -1\n" in config
        editor.evaluate("(e, v) => e.CodeMirror.setValue(v)", config.replace("limit: -1", "limit: 0"))
        page.get_by_role("dialog").get_by_role("button").filter(has_text=re.compile(r"^Materialize$")).click()
        error = page.get_by_role("dialog").filter(has_text="Copy error")
        error.wait_for()
        assert error.inner_text().split("\n") == [
            "Error",
            "format_robustness__source_instances: limit: must be a whole number >= 1, got '0'",
            "Copy error",
            "Copy",
            "OK",
        ]
    finally:
        page.close()
    assert len(demo_ui.runs()) == before


def test_the_headline_and_worst_cell_summary_tables_fit_the_metadata_pane(demo_ui):
    page = demo_ui.page("/assets/format_robustness/mr_violations")
    try:
        headline = metadata_value(page, "M1_M2_M3_pct").locator("table")
        headline.wait_for()
        assert table_rows(headline) == [
            ["workflow_id", "dataset", "MR1", "MR2"],
            ["stub/inline", "construct", "100", "0"],
        ]
        summary = metadata_value(page, "worst_cells").locator("table")
        assert table_rows(summary) == [["violation_pct", "95% CI", "rows shown"], ["100", "[100, 100]", "8 of 8"]]
        pane = metadata_pane_right(page)
        assert right_edge(headline) <= pane and right_edge(summary) <= pane
    finally:
        page.close()


#: Per metadata entry of the asset page (its key → the right edge of what it shows: text, tables,
#: code, images) and per image (alt → natural and displayed width), in CSS px.
ENTRY_EDGES = """() => {
  const pane = Array.from(document.querySelectorAll("[class*='assetEventMetadataScrollContainer']")).pop();
  const rows = pane.querySelector('table').querySelectorAll(':scope > tbody > tr');
  const edges = {}, images = {};
  for (const row of rows) {
    const [key, , value] = row.children;
    let right = 0;
    for (const e of value.querySelectorAll('table, img, pre, code')) right = Math.max(right, e.getBoundingClientRect().right);
    const walk = document.createTreeWalker(value, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      const range = document.createRange();
      range.selectNodeContents(n);
      for (const r of range.getClientRects()) right = Math.max(right, r.right);
    }
    edges[key.innerText.trim()] = right;
    for (const img of value.querySelectorAll('img')) images[img.alt] = [img.naturalWidth, img.getBoundingClientRect().width];
  }
  return {pane: pane.getBoundingClientRect().right, edges, images};
}"""


@pytest.mark.parametrize(
    "path, entries, figures",
    [
        ("/assets/format_robustness/mr_violations", ("worst cell 1 = 100", "M1_M2_M3_pct", "preview"), ()),
        (
            "/assets/model_upgrades/robustness_report_card",
            ("report_card", "preview"),
            (
                "Headline metrics per study and model (current versions, 95% CI)",
                "Headline metrics across each model's versions (95% CI)",
            ),
        ),
        (
            "/assets/format_robustness/accuracy_by_format",
            ("worst cell 1: txt = 50", "preview"),
            ("Accuracy by format (%)",),
        ),
    ],
)
def test_every_metadata_entry_and_figure_fits_the_pane(demo_ui, path, entries, figures):
    """Every entry of the walk-through's asset pages ends left of the pane's right edge at 1440×900
    (the worst cell's rows, the report card's headline block, previews, figures), and a figure is
    shown at its natural width: its text, at least 10 px in the PNG (test_ui_metadata), is 10 px
    on the screen."""
    page = demo_ui.page(path)
    try:
        for key in entries:
            metadata_value(page, key).locator("table").first.wait_for()
        for alt in figures:
            img = page.get_by_alt_text(alt)
            img.wait_for()
            page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=img.element_handle())
        shown = page.evaluate(ENTRY_EDGES)
        assert set(entries) <= set(shown["edges"]), sorted(shown["edges"])
        assert {k: right <= shown["pane"] for k, right in shown["edges"].items()} == dict.fromkeys(
            shown["edges"], True
        ), shown
        assert {alt: natural == displayed for alt, (natural, displayed) in shown["images"].items()} == dict.fromkeys(
            shown["images"], True
        ), shown["images"]
        assert set(figures) <= set(shown["images"])
    finally:
        page.close()
