"""``metamorph trace``: from a metric cell back to the items, prompts and raw completions behind it.

``metamorph trace --warehouse PATH --study S [--suite NAME] --metric M --model ID [--where KEY=VALUE ...]
[--limit N] [--json] [--full-input] [--cache PATH]``

Reads the lineage views of the study's suite ``--suite`` (default: the study's default suite, named
like the study; :mod:`metamorph.suites`) — ``sql/<study>/lineage_views.sql``, created by the asset
``<suite>/lineage_views`` in the schema ``<suite>`` — through a **read-only** DuckDB connection and prints, for each row
behind the cell: the instance id, the slice, the rendered input (its sha256, length and first
characters; ``--full-input`` prints it whole), the exact request (``request_json``), the raw
completion untruncated (``response_text``), the extracted answer and its parse reason. ``--json``
prints one JSON object (``rows``: every field in full).

What "the rows behind a cell" are is each study's business: its
:attr:`metamorph.study.Study.lineage` gives metric → :class:`MetricTrace` (the view, the model
column, the slice keys, which rows are behind a cell and in which order), collected by
:func:`study_traces`. A metric
whose requests and replies live only in the generation cache (``MetricTrace.cache``, e.g. the
WorkflowPerturb judge) reads them from ``--cache`` (default ``generation_cache.duckdb`` next to the
warehouse), opened read-only.

Exit codes: **0** the rows were printed (possibly none: a cell with nothing behind it, e.g. M1 =
0); **2** bad input, one line on stderr naming it — an unknown study, suite (the line names the
study's suites), metric, slice key, model or slice value, a missing or unreadable warehouse, or a warehouse without the study's lineage views.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from metamorph.errors import MetamorphError
from metamorph.sql import open_read_only

__all__ = [
    "COMMANDS",
    "EXIT_OK",
    "EXIT_USAGE",
    "MetricTrace",
    "TraceError",
    "add_arguments",
    "default_warehouse",
    "format_text",
    "metric_trace",
    "parse_where",
    "run",
    "study_traces",
    "trace",
    "trace_command",
]

EXIT_OK, EXIT_USAGE = 0, 2

#: ``--warehouse`` default: ``$METAMORPH_HOME/metamorph.duckdb``, else ``<repo>/data/metamorph.duckdb``
#: (the same rule as ``resources.paths``).
_REPO = Path(__file__).resolve().parent.parent


def default_warehouse() -> str:
    """``$METAMORPH_HOME/metamorph.duckdb`` when ``METAMORPH_HOME`` is set, else ``<repo>/data/metamorph.duckdb``."""
    home = Path(os.environ["METAMORPH_HOME"]) if os.environ.get("METAMORPH_HOME") else _REPO / "data"
    return str(home / "metamorph.duckdb")


@dataclass(frozen=True)
class MetricTrace:
    """Where the rows behind one metric's cells live and how a row is printed.

    Attributes:
        view: the lineage view (in the study's schema).
        model: the view column naming the model of a cell (``--model``).
        id: the instance id column.
        slices: slice key (as given to ``--where``) → view column.
        input: SQL expression of the rendered input (prompt, document or variant text).
        answer: SQL expression of the extracted answer (or the row's score).
        reason: SQL expression of the parse reason.
        request / response: SQL expressions of the exact request and the raw completion (NULL
            when the warehouse does not hold them).
        filter: SQL predicate selecting the rows behind a cell (e.g. ``mr1``: the violating groups).
        defaults: slice values used unless ``--where`` gives the key (e.g. mode = paper).
        order: ORDER BY terms (rows most worth reading first).
        extra: further view columns printed with each row.
        cache: request and raw reply are the generation cache's row of ``generation_key``.
        cells: the view holding every row a cell of this metric is drawn from (its models and slice
            values are the known ones); None = ``view``. Needed when ``view`` keeps only some rows
            (the violating groups): a model evaluated with none of them is then known, and its cell
            has 0 rows behind it instead of being an unknown model.
        sent: SQL expression of one line saying how the input reached the model (e.g. the file name,
            media type and sha256 a file path sent), printed as ``sent:``; None = not printed.
        extracted: SQL expression of the text a named extraction step read from a binary file and
            the model read (NULL when the row had none), printed whole beside the raw completion.
        requires: view columns ``sent`` and ``extracted`` read; when the view lacks one (a warehouse
            whose views predate them), neither is printed.
    """

    view: str
    model: str
    id: str
    slices: Mapping[str, str]
    input: str
    answer: str
    reason: str
    request: str = "request_json"
    response: str = "response_text"
    filter: str = "TRUE"
    defaults: Mapping[str, str] = field(default_factory=dict)
    order: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    cache: bool = False
    cells: str | None = None
    sent: str | None = None
    extracted: str | None = None
    requires: tuple[str, ...] = ()


def study_traces() -> dict[str, dict[str, MetricTrace]]:
    """study → metric → :class:`MetricTrace`: :attr:`metamorph.study.Study.lineage` of each of
    :func:`metamorph.study.studies`; a study without one has no traceable metric."""
    from metamorph.study import studies

    return {name: dict(study.lineage()) for name, study in studies().items() if study.lineage is not None}


class TraceError(MetamorphError):
    """Bad input to :func:`trace` (unknown study / metric / slice / model, no warehouse or view); one line
    (secret-looking text masked, as in every :class:`~metamorph.errors.MetamorphError`)."""


def metric_trace(study: str, metric: str) -> MetricTrace:
    """The :class:`MetricTrace` of ``study``'s ``metric``; :class:`TraceError` naming the known ones otherwise."""
    studies = study_traces()
    if study not in studies:
        raise TraceError(f"unknown study {study!r} (known: {', '.join(sorted(studies))})")
    if metric not in studies[study]:
        raise TraceError(f"unknown metric {metric!r} for {study} (known: {', '.join(studies[study])})")
    return studies[study][metric]


def trace_command(
    study: str,
    metric: str,
    model: str,
    where: Mapping[str, Any] | None = None,
    warehouse: str | None = None,
    suite: str | None = None,
) -> str:
    """The ``metamorph trace`` command line (shell-quoted) for one cell: ``where`` is slice key →
    value (keys must be slices of the metric; ``TraceError`` otherwise); ``warehouse`` is left out
    when None (the command's default applies), and ``suite`` when None or the study's default suite."""
    spec = metric_trace(study, metric)
    parts = ["metamorph", "trace"]
    if warehouse:
        parts += ["--warehouse", str(warehouse)]
    parts += ["--study", study]
    if suite not in (None, study):
        parts += ["--suite", suite]
    parts += ["--metric", metric, "--model", str(model)]
    for k, v in (where or {}).items():
        if k not in spec.slices:
            raise TraceError(f"unknown slice {k!r} for {study} {metric} (known: {', '.join(spec.slices)})")
        parts += ["--where", f"{k}={_text(v)}"]
    return shlex.join(parts)


def _text(v: Any) -> str:
    """A slice value as the view's VARCHAR cast shows it (2 → '2', 0.3 → '0.3', True → 'true')."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def parse_where(items: Sequence[str]) -> dict[str, str]:
    """``["k=v", ...]`` → ``{k: v}``; :class:`TraceError` for an item without ``=`` or a repeated key."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TraceError(f"--where {item!r}: expected KEY=VALUE")
        if key.strip() in out:
            raise TraceError(f"--where {key.strip()!r} given twice")
        out[key.strip()] = value
    return out


def _q(col: str) -> str:
    return '"' + col.replace('"', '""') + '"'


def trace(
    warehouse: str | Path,
    study: str,
    metric: str,
    model: str,
    where: Mapping[str, str] | None = None,
    limit: int | None = 20,
    cache: str | Path | None = None,
    suite: str | None = None,
) -> dict[str, Any]:
    """The rows behind one metric cell of the suite ``suite`` of ``study`` (None: the study's default
    suite), read through a read-only connection to ``warehouse`` from the views of the suite's
    schema (:func:`metamorph.suites.suite_schema`).

    Returns ``{"study", "suite", "metric", "model", "where" (defaults applied), "view" (``<suite>.<view>``), "total" (rows
    behind the cell), "rows"}``; each row has ``instance_id``, ``slice`` (key → value), ``input``
    (full text), ``input_sha256``, ``request_json``, ``response_text`` (untruncated), ``answer``,
    ``parse_reason``, ``sent`` (how the input reached the model; None when the metric does not say),
    ``extracted_text`` (the text an extraction step read from a binary file; None when none) and
    ``extra`` (the metric's further columns). ``limit`` rows at most (None =
    all). ``cache``: the generation cache file for metrics whose request and reply live there
    (``judge``); None = ``generation_cache.duckdb`` next to the warehouse when it exists. A cache
    that cannot be read leaves those fields null and says why in ``note``.

    Raises :class:`TraceError` (one line) for an unknown study, suite (naming the study's suites),
    metric, slice key, model or slice value, a missing or unreadable warehouse, or a warehouse without the view. A model is known
    when it has rows in the metric's ``cells`` view (:class:`MetricTrace`), so a model evaluated
    with nothing behind the cell (no violating group) gives ``total`` 0 and no rows. The views hold
    the registry's models only: a model removed from the registry (or whose partition was removed)
    is refused with why, as its metric tables left it out (view ``<suite>.lineage_models``).
    """
    from metamorph.errors import ConfigError
    from metamorph.suites import suite_schema

    spec = metric_trace(study, metric)
    try:
        schema = suite_schema(study, suite)
    except ConfigError as exc:
        raise TraceError(str(exc)) from None
    given = dict(where or {})
    for k in given:
        if k not in spec.slices:
            raise TraceError(f"unknown slice {k!r} for {study} {metric} (known: {', '.join(spec.slices)})")
    chosen = {**spec.defaults, **given}
    path = Path(warehouse)
    con = open_read_only(path, TraceError)
    try:
        view = f"{_q(schema)}.{_q(spec.view)}"
        try:
            cols = {r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()}
        except duckdb.CatalogException:
            raise TraceError(
                f"{path} has no view {schema}.{spec.view}: materialize the asset {schema}/lineage_views"
            ) from None
        cells_name = spec.cells or spec.view
        cells = f"{_q(schema)}.{_q(cells_name)}"
        if spec.cells is not None:
            try:
                con.execute(f"DESCRIBE {cells}")
            except duckdb.CatalogException:
                raise TraceError(
                    f"{path} has no view {schema}.{cells_name}: materialize the asset {schema}/lineage_views"
                ) from None
        models = sorted(
            str(r[0])
            for r in con.execute(
                f"SELECT DISTINCT {_q(spec.model)} FROM {cells} WHERE {_q(spec.model)} IS NOT NULL"
            ).fetchall()
        )
        if model not in models:
            why = _left_out(con, schema, model)
            if why is not None:
                raise TraceError(
                    f"model {model!r} is left out of the lineage views of {schema}, as of its metric tables: {why} "
                    f"(known: {', '.join(models) or 'none'})"
                )
            raise TraceError(f"unknown model {model!r} in {schema}.{cells_name} (known: {', '.join(models) or 'none'})")
        conds, params = [f"{_q(spec.model)} = ?"], [model]
        for k, v in chosen.items():
            col = spec.slices[k]
            known = sorted(
                str(r[0])
                for r in con.execute(
                    f"SELECT DISTINCT CAST({_q(col)} AS VARCHAR) FROM {cells} WHERE {_q(spec.model)} = ?", [model]
                ).fetchall()
                if r[0] is not None
            )
            if str(v) not in known:
                shown = ", ".join(known[:20]) + (" …" if len(known) > 20 else "")
                raise TraceError(f"unknown {k} {v!r} for model {model!r} in {schema}.{cells_name} (known: {shown})")
            conds.append(f"CAST({_q(col)} AS VARCHAR) = ?")
            params.append(str(v))
        conds.append(f"({spec.filter})")
        where_sql = " AND ".join(conds)
        total = int(con.execute(f"SELECT count(*) FROM {view} WHERE {where_sql}", params).fetchall()[0][0])
        slice_cols = list(dict.fromkeys(spec.slices.values()))
        extra = [c for c in spec.extra if c in cols]
        delivery = set(spec.requires) <= cols
        select = ", ".join(
            [
                f"{_q(spec.id)} AS __id",
                *(_q(c) for c in slice_cols),
                f"({spec.input}) AS __input",
                f"({spec.request}) AS __request",
                f"({spec.response}) AS __response",
                f"({spec.answer}) AS __answer",
                f"({spec.reason}) AS __reason",
                f"({spec.sent if spec.sent and delivery else 'NULL'}) AS __sent",
                f"({spec.extracted if spec.extracted and delivery else 'NULL'}) AS __extracted",
                *(_q(c) for c in extra),
            ]
        )
        sql = f"SELECT {select} FROM {view} WHERE {where_sql}"
        if spec.order:
            sql += " ORDER BY " + ", ".join(spec.order)
        if limit is not None and int(limit) < total:  # a limit above the rows (even above 2**63) is all of them
            sql += f" LIMIT {int(limit)}"
        cur = con.execute(sql, params)
        names = [d[0] for d in cur.description]
        records = [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        con.close()
    back = {c: k for k, c in spec.slices.items()}
    rows = []
    for r in records:
        text = r["__input"]
        rows.append(
            {
                "instance_id": r["__id"],
                "slice": {back[c]: _plain(r[c]) for c in slice_cols},
                "input": text,
                "input_sha256": None if text is None else hashlib.sha256(str(text).encode()).hexdigest(),
                "request_json": r["__request"],
                "response_text": r["__response"],
                "answer": _plain(r["__answer"]),
                "parse_reason": r["__reason"],
                "sent": r["__sent"],
                "extracted_text": r["__extracted"],
                "extra": {c: _plain(r[c]) for c in extra},
            }
        )
    out = {
        "study": study,
        "suite": schema,
        "metric": metric,
        "model": model,
        "where": chosen,
        "view": f"{schema}.{spec.view}",
        "warehouse": str(path.resolve()),
        "total": total,
        "rows": rows,
    }
    if spec.cache and rows:
        out["note"] = _from_cache(rows, cache, path)
    return out


def _left_out(con: duckdb.DuckDBPyConnection, schema: str, model: str) -> str | None:
    """Why ``model``'s rows are left out of the lineage views of ``schema`` (the view
    ``<schema>.lineage_models``: a model not in the registry, or whose partition was removed), or None
    (the model is not left out, or the warehouse's views predate that view)."""
    try:
        rows = con.execute(
            f"SELECT left_out FROM {_q(schema)}.lineage_models WHERE model_id = ? AND NOT current", [model]
        ).fetchall()
    except duckdb.CatalogException:
        return None
    return rows[0][0] if rows else None


def _from_cache(rows: list[dict], cache: str | Path | None, warehouse: Path) -> str:
    """Fill request_json / response_text of ``rows`` from the cache's ``generations`` by their
    ``generation_key`` (read-only); the returned note says where they came from or why not."""
    p = Path(cache) if cache is not None else warehouse.parent / "generation_cache.duckdb"
    if not p.is_file():
        return f"no generation cache {p}: request and reply not shown (pass --cache PATH)"
    keys = [r["extra"].get("generation_key") for r in rows]
    try:
        con = duckdb.connect(str(p), read_only=True)
    except duckdb.Error as exc:
        return f"cannot open the generation cache {p} read-only: {str(exc).splitlines()[0]}"
    try:
        found = {
            k: (req, resp)
            for k, req, resp in con.execute(
                "SELECT key, request_json, response_text FROM generations WHERE list_contains(?, key)",
                [[k for k in keys if k]],
            ).fetchall()
        }
    finally:
        con.close()
    for r, k in zip(rows, keys):
        r["request_json"], r["response_text"] = found.get(k, (None, None))
    missing = sum(1 for k in keys if k not in found)
    return f"request and reply from {p}" + (f"; {missing} key(s) not in the cache" if missing else "")


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


def _block(label: str, text: Any) -> list[str]:
    if text is None:
        return [f"{label}: (none)"]
    return [f"{label}:", str(text)]


def format_text(result: Mapping[str, Any], full_input: bool = False, head: int = 200) -> str:
    """The plain-text printout of :func:`trace`'s result: a header, then per row its id, slice,
    input (sha256, length and the first ``head`` characters unless ``full_input``), how it was
    sent (``sent:``, when the metric says), request, the extracted text the model read (whole, when
    an extraction step made it), raw completion (untruncated), answer and parse reason."""
    where = " ".join(f"{k}={v}" for k, v in result["where"].items())
    shown = len(result["rows"])
    lines = [
        f"{result['study']} {result['metric']} model={result['model']}"
        + (f" {where}" if where else "")
        + f": {result['total']} row(s) behind the cell in {result['view']}"
        + (f", showing {shown}" if shown < result["total"] else "")
    ]
    if result.get("warehouse"):
        lines.append(f"warehouse: {result['warehouse']}")
    if result.get("note"):
        lines.append(f"note: {result['note']}")
    for i, r in enumerate(result["rows"], 1):
        sl = " ".join(f"{k}={v}" for k, v in r["slice"].items())
        lines += ["", f"== {i}. {r['instance_id']}  {sl}"]
        text = r["input"]
        if text is None:
            lines.append("input: (none)")
        elif full_input:
            lines += _block(f"input (sha256 {r['input_sha256'][:16]}, {len(str(text))} chars)", text)
        else:
            s = str(text)
            lines.append(
                f"input: sha256 {r['input_sha256'][:16]}, {len(s)} chars: "
                + json.dumps(s[:head], ensure_ascii=False)
                + ("…" if len(s) > head else "")
            )
        if r.get("sent") is not None:
            lines.append(f"sent: {r['sent']}")
        lines += _block("request_json", r["request_json"])
        if r.get("extracted_text") is not None:  # the text the model read, beside what it replied
            lines += _block("extracted_text", r["extracted_text"])
        lines += _block("response_text", r["response_text"])
        lines.append(f"answer: {r['answer']!r}  parse_reason: {r['parse_reason']}")
        if r["extra"]:
            lines.append("  ".join(f"{k}={v}" for k, v in r["extra"].items() if k not in ("golden_text",)))
    return "\n".join(lines)


# ------------------------------------------------------------------ the command


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``metamorph trace``."""
    p.add_argument(
        "--warehouse",
        default=None,
        help="The DuckDB warehouse (default: $METAMORPH_HOME/metamorph.duckdb, "
        "else data/metamorph.duckdb); opened read-only.",
    )
    studies = study_traces()
    p.add_argument("--study", required=True, help=f"One of {', '.join(sorted(studies))}.")
    p.add_argument(
        "--suite",
        default=None,
        help="A suite of the study (pipelines/defs/<suite>/defs.yaml): its warehouse tables are read "
        "(default: the study's default suite).",
    )
    p.add_argument(
        "--metric", required=True, help="; ".join(f"{s}: {', '.join(m)}" for s, m in sorted(studies.items()))
    )
    p.add_argument(
        "--model",
        required=True,
        help="Model of the cell (registry id; for cells of generated variants: the generator, "
        "'deterministic' for the rule-based variants, or the judge for --metric judge).",
    )
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A slice of the cell, e.g. dataset=medqa (repeatable).",
    )
    p.add_argument("--limit", type=int, default=20, help="Rows printed at most (default 20; 0 = all).")
    p.add_argument("--json", action="store_true", help="One JSON object on stdout, every field in full.")
    p.add_argument("--full-input", action="store_true", help="Print the rendered input whole, not its hash and head.")
    p.add_argument(
        "--cache",
        default=None,
        help="Generation cache file for the judge's requests and replies "
        "(default: generation_cache.duckdb next to the warehouse).",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``metamorph trace``; exit code 0, or 2 with one line on stderr (:class:`TraceError`)."""
    try:
        if args.limit < 0:
            raise TraceError(f"--limit must be >= 0, got {args.limit}")
        result = trace(
            args.warehouse or default_warehouse(),
            args.study,
            args.metric,
            args.model,
            parse_where(args.where),
            limit=args.limit or None,
            cache=args.cache,
            suite=args.suite,
        )
    except TraceError as exc:
        print(f"metamorph trace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=1))
    else:
        print(format_text(result, full_input=args.full_input))
    return EXIT_OK


COMMANDS = {
    "trace": (
        "Trace a metric cell back to its items, prompts and raw completions.",
        __doc__.split("\n\n")[2] if __doc__ else None,
        add_arguments,
        run,
    )
}
