"""Metric tables in the Dagster UI: their worst cells with the rows behind them, their headline
numbers as float metadata, and their asset checks (Dagster concerns only; no metric logic here).

A metric table is a frame of *cells* (one row per workflow × dataset × relation, model × task, …)
whose number was computed from per-row tables upstream (one row per generation, reply or
variant). :class:`Cells` says which column holds the number, which columns name a cell, which
direction is worse, where the CI is and (:class:`Behind`) which upstream rows a cell is made of
and where their raw text lives in the warehouse. From that one declaration every metric asset of
every study gets (:func:`metric_output`, :func:`metric_checks`):

* ``worst_cells`` (markdown): the worst cells with their number and CI (key values shared by
  every worst cell in its heading, so that the table fits the metadata pane);
* ``worst cell <i>: <cell>`` (a table): the rows behind each of them with their raw completions —
  "why is M1 16.7 %?" answered in the UI without SQL. Only the columns a reader reads
  (Behind.first: ids, answer / gold, the reply where it matters) under short names, long strings
  cut, so that the table fits the pane;
  ``worst cell <i>: <cell> (rows in full)`` (JSON) holds the same rows, every column, the raw reply whole
  (the row key cut to 16 hex digits; ``metamorph trace`` prints it whole);
* one float per cell under a short key (``Cells.headline``, e.g. ``M1_pct/<workflow>/<dataset>``,
  less the parts every cell shares: ``M1_pct`` for one workflow and dataset): what Dagster's Plots
  tab draws across materializations, rounded for display; the full names and the CI bounds are in
  one JSON entry ``headline`` (:func:`headline_metadata`);
* ``trace_command`` (text): the ``metamorph trace`` command printing the worst cell's rows with
  their exact requests and raw completions (:func:`trace_command_metadata`, with ``Cells.trace``);
  ``trace_command M1`` … for each relation of a table reporting several (``Cells.trace_each``);
* asset checks: ``rows_present``, ``value_defined``, ``ci_brackets_value``, ``value_in_range``.

:class:`ViewPreview` does the same for a study's lineage views: the rows of a view for the worst
cell of a metric table, as queryable rows in the lineage asset's metadata.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pandas as pd
import pandera.pandas as pa

from metamorph.export import MISSING, markdown_table
from assets._common import display_float, validated_output

#: Cell values that pool every level of their column ('all' languages, '*' datasets, 'Avg.' margins).
POOLED = ("all", "*", "Avg.")

#: Short column names of a worst cell's table (the rows' JSON entry keeps the full names).
SHORT = {
    "instance_id": "instance",
    "item_id": "item",
    "variant_id": "variant",
    "golden_id": "golden",
    "repeat": "rep",
    "decision": "answer",
    "response_text": "reply",
    "workflow_text": "text",
    "severity": "sev",
}

#: (answer, gold) column pairs a worst cell's table shows as one column ``<answer> / <gold>``.
ANSWER_GOLD = (("decision", "gold"), ("value", "gold"), ("expression", "canonical"))

#: The name of that column (a table's column names do not wrap in the UI).
ANSWER_GOLD_NAME = "got / gold"

#: Characters of a row key in a worst cell's JSON entry ("…" included): 16 hex digits, enough to find
#: the row (``LIKE '<prefix>%'``).
JSON_KEY_CHARS = 17

#: Characters of a row key (a 64-hex generation key) shown in a worst cell's table ("…" included);
#: the whole key is in the rows' JSON entry.
KEY_CHARS = 9


@dataclass(frozen=True)
class Behind:
    """The upstream rows one cell of a metric table is made of.

    Attributes:
        rows: builds the per-row frame from the asset's inputs (by input name), e.g. the
            generations with their MR flags; it must carry ``key``.
        pick: the rows behind one cell among the rows matching the cell (``cell`` is the metric
            row as a dict), possibly reordered — e.g. the flagged groups, the wrong replies.
            Rows are first matched on every cell key column they share (a value in
            POOLED matches everything; ``match`` maps a cell column to a differently
            named row column, or to "" to leave it unmatched).
        show: columns of the rows to show, before the raw text.
        table: warehouse table of the study holding the raw text (``<study>.<table>``), looked up
            by ``key``; None = the rows carry everything shown.
        text: columns of ``table`` shown after ``show`` (untruncated).
        limit: rows shown per cell (the total is in the cell's summary row).
        first: the columns a reader reads (ids, decision, gold, raw reply), put first in the table
            so that they fit the metadata pane; the other columns follow, the key last.
        cut: characters of a string cell in the table (longer ones end in "…"); the key is cut to
            :data:`KEY_CHARS`. The rows in full are in the ``… (rows in full)`` JSON entry next to the table.
        excerpt: ``(raw text, cell) -> the part of it shown`` for the text columns (``text``), e.g.
            the evidence of a reply behind an MR2 cell (then cut to ``cut``); None = from its start.
        varying: columns of ``first`` shown only when the rows shown differ in them (a repeat or
            seed that is the same in every row says nothing there).

    With ``first``, the table shows those columns only, under their short names (:data:`SHORT`),
    so that it fits the metadata pane beside the keys at a 1,440 px wide window; every column is
    in the JSON entry.
    """

    rows: Callable[[Mapping[str, pd.DataFrame]], pd.DataFrame]
    pick: Callable[[pd.DataFrame, Mapping[str, Any]], pd.DataFrame] | None = None
    show: tuple[str, ...] = ()
    table: str | None = None
    key: str = "generation_key"
    text: tuple[str, ...] = ("finish_reason", "response_text")
    match: tuple[tuple[str, str], ...] = ()
    limit: int = 24
    first: tuple[str, ...] = ()
    cut: int = 32
    excerpt: Callable[[str, Mapping[str, Any]], str] | None = None
    varying: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cells:
    """How a metric table's cells are read in the UI.

    Attributes:
        value: the column holding each cell's number.
        keys: the columns naming a cell.
        worse: "high" (violations, FSI) or "low" (accuracy, recovery): the direction of a bad cell;
            None = no worst cells (the number has no bad direction), headline and checks only.
        ci: (low, high) columns of the number's CI, if any.
        bounds: the range the number (and its CI) must lie in, e.g. (0, 100) for a percentage.
        headline: ``str.format`` template over the cell's columns (or a function of the cell) naming
            its float metadata entry, e.g. "M{relation[2]}_pct/{workflow_id}/{dataset}"; None = none.
        select: the rows that are headline/worst cells (e.g. the headline extraction mode); default all.
        behind: the rows behind a cell (Behind); None = worst cells without rows.
        n_worst: worst cells shown.
        digits: decimals of the float metadata.
        trace: the cell (metric row as a dict) → ``(metric, model, where)`` of ``metamorph trace``
            (:mod:`metamorph.trace`; ``where``: slice key → value); None = no trace_command.
        trace_each: a key column whose values the table reports side by side (e.g. ``relation``:
            M1, M2, M3): one ``trace_command <value>`` per value, for that value's worst cell,
            instead of one ``trace_command`` for the worst cell overall.
    """

    value: str
    keys: tuple[str, ...]
    worse: str | None = "high"
    ci: tuple[str, str] | None = None
    bounds: tuple[float, float] | None = None
    headline: str | Callable[[Mapping[str, Any]], str] | None = None
    select: Callable[[pd.DataFrame], pd.Series] | None = None
    behind: Behind | None = None
    n_worst: int = 3
    digits: int = 2
    trace: Callable[[Mapping[str, Any]], tuple[str, str, Mapping[str, Any]]] | None = None
    trace_each: str | None = None


#: Every metric table's Cells by asset key, filled as the tables are declared (metric_table).
DECLARED: dict[dg.AssetKey, Cells] = {}


def _isnull(v) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _selected(df: pd.DataFrame, cells: Cells) -> pd.DataFrame:
    return df[cells.select(df).fillna(False).astype(bool)] if cells.select is not None and len(df) else df


def best_value(cells: Cells) -> float | None:
    """The best possible value of a cell: the bound on the good side (0 violations, 100% accuracy);
    for "higher is worse" without bounds, 0; None when unknown."""
    if cells.bounds is not None:
        return float(cells.bounds[0] if cells.worse == "high" else cells.bounds[1])
    return 0.0 if cells.worse == "high" else None


def worst_cells(df: pd.DataFrame, cells: Cells) -> pd.DataFrame:
    """The ``cells.n_worst`` worst cells of ``df``: defined numbers that are not at their best
    possible value (:func:`best_value`; a cell with 0 violations is not "worst"), worst first;
    ties keep table order."""
    if cells.worse not in ("high", "low"):
        return df.head(0)
    d = _selected(df, cells)
    d = d[d[cells.value].notna()]
    best = best_value(cells)
    if best is not None:
        d = d[(pd.to_numeric(d[cells.value], errors="coerce") - best).abs() > 1e-9]
    return d.sort_values(cells.value, ascending=cells.worse == "low", kind="stable").head(cells.n_worst)


def cell_label(cell: Mapping[str, Any], cells: Cells, keys: tuple[str, ...] | None = None) -> str:
    """``a · b · c = 16.67`` for a cell: its key values (those of ``keys``, default every key of
    Cells.keys) and its number (rounded); ``= 16.67`` alone when ``keys`` is empty."""
    v = cell[cells.value]
    names = " · ".join(str(cell[k]) for k in (cells.keys if keys is None else keys))
    return (names + " " if names else "") + f"= {round(float(v), cells.digits):g}"


def _cut(v, n: int):
    """A string longer than ``n`` characters as its first ``n - 1`` and "…"; other values as they are."""
    return v[: n - 1] + "…" if isinstance(v, str) and len(v) > n else v


def brief_rows(part: pd.DataFrame, behind: Behind, cell: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """The rows behind a cell as its table shows them. With Behind.first: those columns only, in
    that order, under their :data:`SHORT` names, the text columns as Behind.excerpt of ``cell``
    gives them, an answer and its gold (:data:`ANSWER_GOLD`) as one column ``got / gold``, the
    Behind.varying columns only when they vary;
    without: every column, the key last and cut to KEY_CHARS. Strings are cut to Behind.cut
    characters."""
    part = part.copy()
    if behind.excerpt is not None and cell is not None:
        for c in behind.text:
            if c in part.columns:
                part[c] = part[c].map(lambda v: behind.excerpt(v, cell) if isinstance(v, str) else v)
    if behind.first:
        first = [
            c
            for c in behind.first
            if c in part.columns and (c not in behind.varying or part[c].astype(str).nunique() > 1)
        ]
        out = part[first].map(lambda v: _cut(v, behind.cut))
        for answer, gold in ANSWER_GOLD:
            if answer in out.columns and gold in out.columns:
                both = (
                    [MISSING if _isnull(a) else str(a) for a in out[answer]],
                    [MISSING if _isnull(g) else str(g) for g in out[gold]],
                )
                out[answer] = [f"{a} / {g}" for a, g in zip(*both)]
                out = out.drop(columns=[gold]).rename(columns={answer: ANSWER_GOLD_NAME})
        return out.rename(columns=SHORT)
    order = [c for c in part.columns if c != behind.key]
    out = part[order].map(lambda v: _cut(v, behind.cut)) if order else part[[]].copy()
    if behind.key in part.columns:
        out[behind.key] = part[behind.key].map(lambda v: _cut(v, KEY_CHARS))
    return out


def rows_json(part: pd.DataFrame, key: str | None = None) -> dg.MetadataValue:
    """Every row behind a cell, every column whole (the raw reply) but the row key ``key``, cut to
    :data:`JSON_KEY_CHARS` (the UI shows a JSON value under 1,000 characters in place, and a 64-hex
    key is a run that does not wrap: 540 px; ``metamorph trace`` prints the whole key), as JSON metadata."""
    return dg.MetadataValue.json(
        [
            {str(c): _cut(_plain(v), JSON_KEY_CHARS) if c == key else _plain(v) for c, v in r.items()}
            for r in part.to_dict(orient="records")
        ]
    )


def rows_behind(cell: Mapping[str, Any], rows: pd.DataFrame, cells: Cells) -> pd.DataFrame:
    """The rows behind one cell: ``rows`` matching the cell on every shared key column (pooled
    values match all), then Behind.pick."""
    behind = cells.behind
    alias = dict(behind.match)
    mask = pd.Series(True, index=rows.index)
    for k in cells.keys:
        col = alias.get(k, k)  # "" = not matched (e.g. a drift cell needs its baseline's rows too)
        if col and col in rows.columns and cell[k] not in POOLED:
            mask &= rows[col].astype(str) == str(cell[k])
    picked = rows[mask]
    return behind.pick(picked, cell) if behind.pick is not None else picked


def warehouse_schema(study: str) -> str:
    """The warehouse schema of the asset being materialized: its key prefix — the study's name for
    the study's default suite, the suite's name for another suite (:mod:`pipelines.components`);
    ``study`` when no asset is being materialized."""
    try:
        return dg.AssetExecutionContext.get().asset_key.path[0]
    except dg.DagsterInvariantViolationError:
        return study


def _with_text(con, study: str, behind: Behind, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``behind.text`` from ``<study>.<behind.table>``, joined on ``behind.key``."""
    keys = rows[[behind.key]].drop_duplicates()
    con.register("__metamorph_behind", keys)
    try:
        cols = ", ".join(f't."{c}"' for c in behind.text)
        raw = con.execute(
            f'SELECT t."{behind.key}", {cols} FROM "{study}"."{behind.table}" AS t '
            f'JOIN __metamorph_behind AS k USING ("{behind.key}")'
        ).df()
    finally:
        con.unregister("__metamorph_behind")
    out = rows.drop(columns=[c for c in behind.text if c in rows.columns]).merge(
        raw.drop_duplicates(behind.key), on=behind.key, how="left"
    )
    # the raw text right after the columns naming the row; the 64-hex key last (copy it to trace)
    return out[[*(c for c in out.columns if c not in (*behind.text, behind.key)), *behind.text, behind.key]]


def _plain(v):
    if _isnull(v):
        return None
    if hasattr(v, "item"):
        v = v.item()
    return v if isinstance(v, (str, int, float, bool)) else str(v)


def table_value(df: pd.DataFrame) -> dg.MetadataValue:
    """``df`` as Dagster table metadata: the UI shows every cell in full ("Show table")."""

    def kind(s: pd.Series) -> str:
        if pd.api.types.is_bool_dtype(s):
            return "bool"
        if pd.api.types.is_integer_dtype(s):
            return "int"
        return "float" if pd.api.types.is_float_dtype(s) else "string"

    schema = dg.TableSchema(columns=[dg.TableColumn(str(c), kind(df[c])) for c in df.columns])
    return dg.MetadataValue.table(
        records=[dg.TableRecord({str(c): _plain(v) for c, v in r.items()}) for r in df.to_dict(orient="records")],
        schema=schema,
    )


def worst_cells_metadata(
    df: pd.DataFrame, cells: Cells, study: str, inputs: Mapping[str, pd.DataFrame] | None = None, warehouse=None
) -> dict:
    """``worst_cells`` (markdown) and, with Cells.behind, one table per worst cell with
    the rows behind it and their raw text (``warehouse``: a DuckDBResource)."""
    worst = worst_cells(df, cells)
    if cells.worse is None:
        return {}
    if worst.empty:
        best = best_value(cells)
        defined = _selected(df, cells)[cells.value].notna().any()
        return {
            "worst_cells": dg.MetadataValue.md(
                f"_every cell is at its best possible value ({best:g}): no worst cell_"
                if defined and best is not None
                else "_no cell with a defined value_"
            )
        }
    # key values shared by every worst cell go in the heading, not in each row and entry name
    common = tuple(k for k in cells.keys if len(worst) > 1 and worst[k].astype(str).nunique() == 1)
    varying = tuple(k for k in cells.keys if k not in common)
    if len(worst) == 1:
        common, varying = cells.keys, ()
    summary = worst[list(dict.fromkeys([*varying, cells.value]))].round(cells.digits + 2).copy()
    if cells.ci:
        lo, hi = (worst[c].round(cells.digits + 2) for c in cells.ci)
        summary["95% CI"] = [
            "" if _isnull(a) or _isnull(b) else f"[{float(a):g}, {float(b):g}]" for a, b in zip(lo, hi)
        ]
    details, notes = {}, []
    if cells.behind is not None and inputs is not None:
        behind = cells.behind
        rows = behind.rows(inputs)
        counts = []
        picked = {}
        for i, cell in enumerate(worst.to_dict(orient="records"), 1):
            part = rows_behind(cell, rows, cells)
            counts.append(len(part))
            picked[i] = (cell, part.head(behind.limit))
        summary["rows shown"] = [f"{min(n, behind.limit)} of {n}" for n in counts]  # the entry's table: the first ones
        joined = behind.table is not None and warehouse is not None
        with warehouse.get_connection() if joined else nullcontext() as con:
            for i, (cell, part) in picked.items():
                # the key once, even when ``show`` lists it (a repeated column would be dropped by the UI)
                part = part[[c for c in dict.fromkeys((*behind.show, behind.key)) if c in part.columns]]
                if joined and len(part):
                    try:
                        part = _with_text(con, warehouse_schema(study), behind, part)
                    except Exception as exc:  # table missing or renamed: say so, keep the rows
                        notes.append(f"raw text not joined: {type(exc).__name__}: {str(exc).splitlines()[0]}")
                label = cell_label(cell, cells, varying)
                name = f"worst cell {i}: {label}" if varying else f"worst cell {i} {label}"
                details[name] = table_value(brief_rows(part, behind, cell))
                details[f"{name} (rows in full)"] = rows_json(part, behind.key)
    where = "; ".join(f"{k} = {worst.iloc[0][k]}" for k in common)
    head = (
        f"Worst {len(worst)} cell(s) by {cells.value} ({cells.worse}er is worse)"
        + (f", {where}" if where else "")
        + ("; rows behind each, with the raw text: entries 'worst cell 1' …" if details else ".")
    )
    md = head + "\n\n" + markdown_table(summary)
    if notes:
        md += "\n\n" + "; ".join(sorted(set(notes)))
    return {
        "worst_cells": dg.MetadataValue.md(md),
        **details,
        **traces_metadata(df, worst, cells, study, warehouse),
    }


def traces_metadata(df: pd.DataFrame, worst: pd.DataFrame, cells: Cells, study: str, warehouse=None) -> dict:
    """The trace commands of a metric table: ``trace_command`` for its worst cell (``worst``'s
    first row) or, with Cells.trace_each, ``trace_command <value>`` for each value of that column
    among the selected cells with a defined number, in sorted order, each for its worst cell (the
    first in table order when every cell of the value is at its best)."""
    if cells.trace is None:
        return {}
    if cells.trace_each is None:
        return trace_command_metadata(worst.iloc[0].to_dict(), cells, study, warehouse)
    d = _selected(df, cells)
    d = d[d[cells.value].notna()]
    out = {}
    for value, part in sorted(d.groupby(cells.trace_each, sort=False), key=lambda kv: str(kv[0])):
        bad = worst_cells(part, cells)
        cell = (bad if len(bad) else part).iloc[0].to_dict()
        out[f"trace_command {value}"] = trace_command_metadata(cell, cells, study, warehouse)["trace_command"]
    return out


def trace_command_metadata(cell: Mapping[str, Any], cells: Cells, study: str, warehouse=None) -> dict:
    """``{"trace_command": text}``: the ``metamorph trace`` command of ``cell`` (built by
    :func:`metamorph.trace.trace_command` from ``Cells.trace``); ``{}`` without ``Cells.trace``.
    The command names no ``--warehouse`` when the asset's warehouse resource (a DuckDBResource,
    whose ``database`` is relative to ``METAMORPH_HOME`` unless absolute) is
    ``$METAMORPH_HOME/metamorph.duckdb``, the command's default, so that it stays right when the
    data directory moves; a warehouse elsewhere is named by its absolute path. Materialized as
    an asset of a suite other than the study's default one, the command names that suite
    (``--suite``), whose schema holds the rows behind the cell."""
    if cells.trace is None:
        return {}
    from metamorph.trace import trace_command
    from resources.paths import home_path, home_relative

    metric, model, where = cells.trace(cell)
    database = getattr(warehouse, "database", None)
    if database is not None:  # relative to METAMORPH_HOME unless absolute
        database = home_path(database)
    if database is not None and home_relative(database) == "metamorph.duckdb":
        database = None
    command = trace_command(study, metric, model, where, warehouse=database, suite=warehouse_schema(study))
    return {"trace_command": dg.MetadataValue.text(command)}


def headline_keys(names: list[str]) -> list[str]:
    """Short metadata keys for the headline ``names`` of one table (``M1_pct/smollm2/inline/construct``):
    a ``/``-separated part that every name has alike at the same place is left out after the first
    part (one model and dataset: ``M1_pct``; two models: ``M1_pct/smollm2``, ``M1_pct/gemma3``), so
    that a key fits the metadata pane's key column. Names with different numbers of parts, or whose
    short keys would collide, are kept whole."""
    parts = [n.split("/") for n in names]
    if not parts or len({len(p) for p in parts}) != 1:
        return list(names)
    keep = [0] + [i for i in range(1, len(parts[0])) if len({p[i] for p in parts}) > 1]
    short = ["/".join(p[i] for i in keep) for p in parts]
    return short if len(set(short)) == len(set(names)) else list(names)


def headline_metadata(df: pd.DataFrame, cells: Cells) -> dict:
    """One float per selected cell under a short key (:func:`headline_keys` of its Cells.headline
    name), rounded to Cells.digits and for display (:func:`assets._common.display_float`: one
    decimal for a percentage) — what Dagster's Plots tab draws across materializations — and one
    JSON entry ``headline``: short key -> ``{"cell"`` (the full name), ``"value"``, ``"ci_low"``,
    ``"ci_high"}`` (the bounds null when the table has no CI or the cell none)."""
    if cells.headline is None:
        return {}
    pct = cells.bounds in ((0.0, 100.0), (-100.0, 100.0))  # a percentage: one decimal (display_float)

    def shown(v):
        return None if _isnull(v) else display_float(round(float(v), cells.digits), pct)

    selected = _selected(df, cells).to_dict(orient="records")
    names = [cells.headline(c) if callable(cells.headline) else cells.headline.format(**c) for c in selected]
    out, entries = {}, {}
    for cell, name, key in zip(selected, names, headline_keys(names)):
        if _isnull(cell[cells.value]):
            continue
        out[key] = dg.MetadataValue.float(shown(cell[cells.value]))
        low, high = (shown(cell[c]) for c in cells.ci) if cells.ci else (None, None)
        entries[key] = {"cell": name, "value": shown(cell[cells.value]), "ci_low": low, "ci_high": high}
    if entries:
        out["headline"] = dg.MetadataValue.json(entries)
    return out


def metric_checks(study: str, name: str, cells: Cells | None) -> list[dg.AssetCheckSpec]:
    """The check specs of metric asset ``<study>/<name>`` (results from check_results)."""
    key = [study, name]
    specs = [dg.AssetCheckSpec("rows_present", asset=key, description="The table has at least one row.")]
    if cells is None:
        return specs
    specs.append(
        dg.AssetCheckSpec(
            "value_defined", asset=key, description=f"Every cell has a {cells.value} (warns on undefined cells)."
        )
    )
    if cells.ci:
        lo, hi = cells.ci
        specs.append(
            dg.AssetCheckSpec(
                "ci_brackets_value",
                asset=key,
                description=f"{lo} ≤ {cells.value} ≤ {hi} wherever all three are defined.",
            )
        )
    if cells.bounds:
        specs.append(
            dg.AssetCheckSpec(
                "value_in_range",
                asset=key,
                description=(
                    f"{cells.value}{' and its CI' if cells.ci else ''} lie in [{cells.bounds[0]:g}, {cells.bounds[1]:g}]."
                ),
            )
        )
    return specs


def check_results(df: pd.DataFrame, cells: Cells | None) -> list[dg.AssetCheckResult]:
    """Results of metric_checks on the validated frame ``df``."""
    res = [
        dg.AssetCheckResult(
            check_name="rows_present", passed=len(df) > 0, metadata={"rows": dg.MetadataValue.int(len(df))}
        )
    ]
    if cells is None:
        return res
    d = _selected(df, cells)
    undefined = d[d[cells.value].isna()]
    res.append(
        dg.AssetCheckResult(
            check_name="value_defined",
            passed=undefined.empty,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "undefined_cells": dg.MetadataValue.int(len(undefined)),
                "cells": dg.MetadataValue.int(len(d)),
                "examples": dg.MetadataValue.md(markdown_table(undefined.head(10))),
            },
        )
    )
    if cells.ci:
        lo, hi = cells.ci
        full = d.dropna(subset=[lo, cells.value, hi])
        bad = full[(full[lo] > full[cells.value] + 1e-9) | (full[cells.value] > full[hi] + 1e-9)]
        res.append(
            dg.AssetCheckResult(
                check_name="ci_brackets_value",
                passed=bad.empty,
                metadata={
                    "violations": dg.MetadataValue.int(len(bad)),
                    "checked": dg.MetadataValue.int(len(full)),
                    "examples": dg.MetadataValue.md(markdown_table(bad.head(10))),
                },
            )
        )
    if cells.bounds:
        low, high = cells.bounds
        cols = [cells.value, *(cells.ci or ())]
        outside = pd.Series(False, index=d.index)
        for c in cols:
            v = pd.to_numeric(d[c], errors="coerce")
            outside |= v.notna() & ((v < low) | (v > high))
        res.append(
            dg.AssetCheckResult(
                check_name="value_in_range",
                passed=not outside.any(),
                metadata={
                    "violations": dg.MetadataValue.int(int(outside.sum())),
                    "examples": dg.MetadataValue.md(markdown_table(d[outside].head(10))),
                },
            )
        )
    return res


def metric_output(
    model: type[pa.DataFrameModel],
    df: pd.DataFrame,
    study: str,
    name: str,
    cells: Cells | None = None,
    *,
    inputs: Mapping[str, pd.DataFrame] | None = None,
    warehouse=None,
    metadata: dict | None = None,
) -> Iterator:
    """Validate ``df`` against ``model`` (a failure raises and nothing is written) and yield its
    Output with the standard metadata, its worst cells and headline floats, then the check
    results of metric_checks (declare those in the asset's ``check_specs``)."""
    out = validated_output(model, df, name, metadata)
    extra = {}
    if cells is not None:
        extra = {
            **worst_cells_metadata(out.value, cells, study, inputs, warehouse),
            **headline_metadata(out.value, cells),
        }
    yield dg.Output(out.value, metadata={**out.metadata, **extra})
    yield from check_results(out.value, cells)


#: Characters of a line of SQL in a metadata code block. A code block never wraps; at the UI's
#: monospace font (about 8.4 px a character) a 40-character line and the block's padding fit the
#: value's VALUE_PX (360 px) beside its key at 1,440 px.
SQL_LINE_CHARS = 40

#: A token of SQL that must stay on one line: a run of non-spaces, a quoted literal or identifier in
#: it taken whole (spaces and all).
_SQL_TOKEN = re.compile(r"(?:'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|[^\s'\"])+")


def sql_lines(clauses: Sequence[tuple[str, str]], width: int = SQL_LINE_CHARS) -> str:
    """SQL laid out for a code block no wider than ``width`` characters: each ``(keyword, body)``
    clause starts a line with its keyword (``SELECT``, ``FROM``, ``WHERE``, ``AND``, ``ORDER BY``; a
    keyword starting with spaces is indented under the clause above) and its body fills lines of at
    most ``width`` characters, continued two spaces further in. A body is broken only between
    tokens (:data:`_SQL_TOKEN`): a quoted literal is never split, and one longer than ``width`` has
    a line of its own."""
    lines = []
    for keyword, body in clauses:
        indent = " " * (len(keyword) - len(keyword.lstrip()) + 2)
        line = keyword
        for tok in _SQL_TOKEN.findall(body):
            if line == keyword or len(line) + 1 + len(tok) <= width:
                line = f"{line} {tok}"
            else:
                lines.append(line)
                line = indent + tok
        lines.append(line)
    return "\n".join(lines)


@dataclass(frozen=True)
class ViewPreview:
    """Rows of a lineage view for the worst cell of a metric table, for the lineage asset's metadata.

    Attributes:
        view: the view (in the study's schema), e.g. "mr_violation_lineage".
        table: the metric table whose worst cell is previewed, e.g. "mr_violations".
        cells: how ``table`` is read (Cells, ``worse`` must be set).
        rename: cell column -> view column where they differ (e.g. language -> cell_language);
            cell columns absent from the view are not matched.
        where: an extra SQL predicate for the cell (e.g. the MR column of the cell's relation).
        columns: view columns shown (all when empty).
        order: ORDER BY terms of the rows shown (e.g. "instance_id", "repeat").
        limit: rows shown.
    """

    view: str
    table: str
    cells: Cells
    rename: tuple[tuple[str, str], ...] = ()
    where: Callable[[Mapping[str, Any]], str] | None = None
    columns: tuple[str, ...] = ()
    order: tuple[str, ...] = ()
    limit: int = 50

    def metadata(self, con, study: str) -> dict:
        """``worst_cell``, the SQL selecting its rows (copyable; ``worst_cell_sql``, laid out in lines
        of :data:`SQL_LINE_CHARS` by :func:`sql_lines`) and the rows themselves."""
        table = con.execute(f'SELECT * FROM "{study}"."{self.table}"').df()
        worst = worst_cells(table, self.cells)
        if worst.empty:
            return {"worst_cell": dg.MetadataValue.text(f"{self.table} has no cell with a defined value")}
        cell = worst.iloc[0].to_dict()
        view_cols = {r[0] for r in con.execute(f'DESCRIBE "{study}"."{self.view}"').fetchall()}
        alias = dict(self.rename)
        conds, params = [], []
        for k in self.cells.keys:
            col = alias.get(k, k)
            if col in view_cols:
                conds.append(f'"{col}" = ?')
                params.append(cell[k])
        if self.where is not None:
            conds.append(self.where(cell))
        cols = ", ".join(f'"{c}"' for c in self.columns) if self.columns else "*"
        sql = f"SELECT {cols} FROM {study}.{self.view} WHERE {' AND '.join(conds) or 'TRUE'}"
        n = con.execute(f"SELECT count(*) FROM ({sql})", params).fetchall()[0][0]
        if self.order:
            sql += " ORDER BY " + ", ".join(self.order)
        rows = con.execute(f"{sql} LIMIT {self.limit}", params).df()
        values = iter("'" + str(p).replace("'", "''") + "'" for p in params)
        shown = [c.replace("?", next(values), 1) if c.endswith("?") else c for c in conds] or ["TRUE"]
        clauses = [
            ("SELECT", cols),
            ("FROM", f"{study}.{self.view}"),
            *((("WHERE" if i == 0 else "  AND"), c) for i, c in enumerate(shown)),
            *([("ORDER BY", ", ".join(self.order))] if self.order else []),
        ]
        return {
            "worst_cell": dg.MetadataValue.text(f"{self.table}: {cell_label(cell, self.cells)}"),
            "worst_cell_rows": dg.MetadataValue.int(int(n)),
            "worst_cell_sql": dg.MetadataValue.md(f"```sql\n{sql_lines(clauses)};\n```"),
            f"{self.view} (worst cell)": table_value(rows),
        }
