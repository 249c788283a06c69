"""Materialization metadata helpers shared by every study's assets (Dagster concerns only)."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg
import pandas as pd
import pandera.pandas as pa
from pydantic import Field, create_model, field_validator

from metamorph.export import display_float, js_length, markdown_cell, markdown_table
from metamorph.schemas import table_schema_metadata, validate_frame
from metamorph.study import ALL_ROWS, NO_BUDGET, Option, Study


def md_text(value) -> str:
    """``value`` as literal text inside markdown rendered by the Dagster UI (GFM without raw HTML:
    a copied ``<placeholder>`` would vanish, ``|`` split a cell, a newline end a row):
    :func:`metamorph.export.markdown_cell` of its text, ``None`` as ``""``."""
    return markdown_cell("" if value is None else str(value))


#: Dagster's UI renders a markdown metadata value in place only when its text is shorter than this
#: many characters (JavaScript string length: UTF-16 code units); a longer one sits behind "[Show Markdown]".
INLINE_MD_CHARS = 1000
#: Widths (characters) a preview's cells are cut to, widest first, until the preview fits inline.
PREVIEW_CUTS = (80, 40, 24, 16, 12)
#: Fewest rows a preview shows before it is cut narrower or leaves out columns.
PREVIEW_MIN_ROWS = 3

#: Width (px) of a metadata entry's value on an asset's page at a 1,440 × 900 window: the pane is
#: 784 px, of which the key column (as wide as its longest word, e.g. ``dagster/component_origin``)
#: and the timestamp column take about 400. A table wider than this runs past the pane's edge.
VALUE_PX = 360
#: Width (px) of a character of a table cell in the UI's font, and a cell's horizontal padding.
CHAR_PX = 7.5
CELL_PAD_PX = 16
#: Where a cell's text may wrap: after whitespace, and after a hyphen.
_BREAKS = re.compile(r"\s+|(?<=-)")


def _run_chars(v, max_chars: int | None, cut: bool = True) -> int:
    """Length of the longest unbreakable run (:data:`_BREAKS`) of ``v``'s text; the text cut to
    ``max_chars`` as :func:`metamorph.export.markdown_table` cuts it unless ``cut`` is false."""
    text = format(v, "g") if isinstance(v, float) else str(v)
    if cut and max_chars is not None and len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return max((len(w) for w in _BREAKS.split(text)), default=0)


def _column_px(name, values: Sequence, max_chars: int | None) -> float:
    """Min-content width (px) of one column of :func:`table_px`: its ``name`` (never cut) or its
    longest run among ``values`` (cut to ``max_chars``), plus :data:`CELL_PAD_PX`."""
    return max([_run_chars(name, None), *(_run_chars(v, max_chars) for v in values)]) * CHAR_PX + CELL_PAD_PX


def table_px(df: pd.DataFrame, max_chars: int | None = None) -> float:
    """The narrowest the UI can lay out ``df`` as a table (its CSS min-content width, estimated):
    per column its name or a value's longest unbreakable run (:data:`_BREAKS`; a value cut to
    ``max_chars`` as :func:`metamorph.export.markdown_table` cuts it, a name never) at :data:`CHAR_PX`, plus
    :data:`CELL_PAD_PX`."""
    return sum(_column_px(c, df[c].tolist(), max_chars) for c in df.columns)


def preview_md(df: pd.DataFrame, n: int = 10, max_chars: int = 80) -> dg.MetadataValue:
    """The first rows of ``df`` as a compact markdown table that the UI renders in place (shorter
    than :data:`INLINE_MD_CHARS`) and within the metadata pane (:func:`table_px` at most
    :data:`VALUE_PX`), text shown literally: up to ``n`` rows with cells cut to ``max_chars``;
    while too long or too wide, fewer rows (down to :data:`PREVIEW_MIN_ROWS`), then cells cut
    shorter (:data:`PREVIEW_CUTS`), then the last columns left out, which a last line says
    (``_5 of 9 columns shown (the table holds them all)_``). The rows are the table's first; its
    row count is the ``row_count`` entry beside it.

    Each column's width is measured once per cut and row count, and a candidate is rendered only
    once it fits the pane's width (a wide table tries hundreds of candidates: rendering each took
    seconds per table)."""
    rows = min(n, len(df))
    cuts = [c for c in PREVIEW_CUTS if c < max_chars] if max_chars else list(PREVIEW_CUTS)
    head = df.head(rows)
    values = [head.iloc[:, j].tolist() for j in range(len(df.columns))]
    widths: dict[tuple[int, int | None, int], float] = {}

    def width(ncols: int, cut: int | None, k: int) -> float:  # table_px(df.iloc[:k, :ncols], cut)
        for j in range(ncols):
            if (j, cut, k) not in widths:
                widths[j, cut, k] = _column_px(df.columns[j], values[j][:k], cut)
        return sum(widths[j, cut, k] for j in range(ncols))

    text = markdown_table(head, max_chars, compact=True)
    for ncols in range(len(df.columns), 0, -1):
        for cut in [max_chars, *cuts]:
            for k in range(rows, min(PREVIEW_MIN_ROWS, rows) - 1, -1):
                if ncols > 1 and width(ncols, cut, k) > VALUE_PX:
                    continue  # too wide: not rendered (one column always is, the last candidate too)
                text = markdown_table(df.iloc[:k, :ncols], cut, compact=True)
                if ncols < len(df.columns):
                    text += f"\n\n_{ncols} of {len(df.columns)} columns shown (the table holds them all)_"
                if js_length(text) < INLINE_MD_CHARS:
                    return dg.MetadataValue.md(text)
    return dg.MetadataValue.md(text)


def schema_md(model: type[pa.DataFrameModel]) -> dg.MetadataValue:
    """The table's columns with their pandera descriptions, for the UI (descriptions shown literally)."""
    return dg.MetadataValue.table_schema(
        dg.TableSchema(
            columns=[dg.TableColumn(name=n, type=t, description=md_text(d)) for n, t, d in table_schema_metadata(model)]
        )
    )


#: Resolution of a figure's PNGs (the inline one and the full-size one its image links to).
FIGURE_DPI = 110
#: Widest inline figure (px): the value column of the asset page's metadata (:data:`VALUE_PX`). An
#: image is shown at its pixel size, never scaled to the column: a wider one runs past the pane.
INLINE_MAX_PX = VALUE_PX
#: Smallest text of an inline figure (px at the size it is shown).
MIN_TEXT_PX = 10


def _png(fig, dpi: float) -> tuple[bytes, int]:
    """``fig`` as PNG bytes at ``dpi`` (cropped to its content) and their width in pixels."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    data = buf.getvalue()
    return data, int.from_bytes(data[16:20], "big")  # the IHDR width


def _texts(fig) -> list:
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def inline_png(fig) -> tuple[bytes, float]:
    """The figure as the UI shows it inline: every text at least :data:`MIN_TEXT_PX` pixels at
    :data:`FIGURE_DPI`, the figure made narrower (its axes, not its text) until the PNG is at most
    :data:`INLINE_MAX_PX` wide (eight tries). Returns the PNG and its smallest text in pixels.
    Changes ``fig``."""
    floor = MIN_TEXT_PX * 72 / FIGURE_DPI
    for t in _texts(fig):
        t.set_fontsize(max(t.get_fontsize(), floor))
    data, width = _png(fig, FIGURE_DPI)
    for _ in range(8):
        if width <= INLINE_MAX_PX:
            break
        w, h = fig.get_size_inches()
        fig.set_size_inches(max(1.0, w - (width - INLINE_MAX_PX) / FIGURE_DPI - 0.05), h)
        if fig.get_layout_engine() is not None:
            fig.get_layout_engine().execute(fig)
        data, width = _png(fig, FIGURE_DPI)
    smallest = min((t.get_fontsize() for t in _texts(fig)), default=floor) * FIGURE_DPI / 72
    return data, smallest


def figure_md(fig, title: str | None = None) -> dg.MetadataValue:
    """A matplotlib figure as PNG files the UI shows inline on the asset's page:
    :func:`resources.figures.figure_markdown` — ``[![<title>](<inline PNG>)](<full PNG>)`` under
    ``$METAMORPH_FIGURES_URL``, shorter than the 1,000 characters up to which Dagster's UI renders
    markdown metadata in place (a base64-embedded PNG is always longer, so it sat behind
    "[Show Markdown]"). The inline PNG is :func:`inline_png` (fits the pane, text legible); the
    full one is the figure as drawn, at :data:`FIGURE_DPI`. The alt text is ``title``, else the
    figure's (the first axes' title, else its suptitle)."""
    import matplotlib.pyplot as plt

    from resources.figures import figure_markdown

    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    title = title or (titles[0] if titles else (fig.get_suptitle() or "figure"))
    full = _png(fig, FIGURE_DPI)[0]
    inline = inline_png(fig)[0]
    plt.close(fig)
    return dg.MetadataValue.md(figure_markdown(inline, title, full=full))


class LimitConfig(dg.Config):
    """Base of a study's source asset config: its ``sources`` and ``limit`` fields are generated
    from the study's ``--source`` and ``--limit`` options (:func:`study_config`): ``limit`` rows of
    each source, -1 (:data:`~metamorph.study.ALL_ROWS`) = every row; any other value but N ≥ 1 fails
    (as ``--limit``) when the step builds its config, and at launch for the study's inputs job."""

    @property
    def row_limit(self) -> int | None:
        """``limit`` as the loaders take it: None = every row."""
        return None if self.limit == ALL_ROWS else self.limit


class BudgetConfig(dg.Config):
    """Base of a generation asset's config: its ``budget_usd`` field, generated from
    ``--budget-usd`` (:func:`study_config`), is the most this step may spend for one model (USD at
    the registry's ``price_per_mtok``), checked against the cost plan before the first call
    (:func:`plan_and_guard`); -1 (:data:`~metamorph.study.NO_BUDGET`) = no budget."""


def _option_check(option: Option):
    def check(cls, value):
        return option.check_field(value)

    return check


def study_config(
    study: Study,
    asset: str,
    base: type[dg.Config] = dg.Config,
    *,
    name: str,
    module: str,
    doc: str | None = None,
    **fields: tuple[Any, Any],
) -> type[dg.Config]:
    """The Dagster config class of ``study``'s ``asset``, generated from the study's options: a
    subclass of ``base`` called ``name`` (in ``module``, docstring ``doc``) with one field per
    option targeting the asset (:attr:`metamorph.study.Option.targets`) — its type, default and
    description those of the option (:meth:`~metamorph.study.Option.field_type`,
    :meth:`~metamorph.study.Option.field_default`, :meth:`~metamorph.study.Option.field_help`),
    validated by :meth:`~metamorph.study.Option.check_field` when the option
    :attr:`~metamorph.study.Option.restricts` its values, so the launchpad rejects a value with the
    command line's words — then the asset's own ``fields`` (name → ``(type, Field(...))``).
    ``TypeError`` when one of ``fields`` is an option's field (declared once, in the option)."""
    definitions: dict[str, Any] = {}
    validators: dict[str, Any] = {}
    for option in study.all_options():
        for target, fld in option.targets:
            if target != asset:
                continue
            default = option.field_default()
            definitions[fld] = (
                option.field_type() if default is not None else option.field_type() | None,
                Field(default=default, description=option.field_help()),
            )
            if option.restricts:
                validators[f"check_{fld}"] = field_validator(fld)(classmethod(_option_check(option)))
    clash = sorted(set(definitions) & set(fields))
    if clash:
        raise TypeError(f"{study.name}/{asset}: {clash} are options' fields; declare them in the Option only")
    return create_model(
        name,
        __base__=base,
        __doc__=doc,
        __module__=module,
        __validators__=validators,
        **definitions,
        **fields,
    )


def effective_budget(*budgets: float | None) -> float | None:
    """The smallest of the budgets that are set (``None`` and :data:`NO_BUDGET` are unset), else ``None``."""
    set_ = [b for b in budgets if b is not None and b != NO_BUDGET]
    return min(set_) if set_ else None


def plan_and_guard(
    context, requests, spec, provider, cache, budget_usd: float | None, label: str, upper_bound: bool = False
):
    """The cost plan of ``requests`` (:func:`metamorph.costplan.plan_requests`: cache hits from
    ``cache``, prompt tokens from ``provider``'s tokenizer when local), logged as one line, then
    :func:`metamorph.costplan.check_budget` — raises :class:`~metamorph.errors.BudgetError` before
    any call, so nothing is called or written. ``upper_bound``: ``requests`` are every call the
    step can make (some depend on replies), shown "up to". Returns the :class:`~metamorph.costplan.CostPlan`."""
    from metamorph.costplan import cached_keys, check_budget, plan_requests, token_counter

    count, method = token_counter(spec, provider)
    hits = cached_keys(cache, requests, spec, stale_before=runner_options(context)["stale_before"])
    plan = plan_requests(requests, spec, hits, count=count, method=method, label=label, upper_bound=upper_bound)
    context.log.info("cost plan: " + plan.line())
    check_budget(plan, budget_usd)
    return plan


def plan_metadata(plan) -> dict:
    """Materialization metadata of a :class:`~metamorph.costplan.CostPlan`: ``cost_plan`` (JSON:
    calls, cache hits, tokens with how they were counted, price, est. cost) and ``est_cost_usd``."""
    md = {"cost_plan": dg.MetadataValue.json(plan.as_dict())}
    if plan.cost_usd is not None:
        md["est_cost_usd"] = dg.MetadataValue.float(round(plan.cost_usd, 6))
    return md


#: A metadata key naming a percentage: a ``pct`` or ``pp`` word (``M1_pct/…``, ``sen_pp``) or a ``%``.
_PERCENT_KEY = re.compile(r"(^|[^a-z0-9])(pct|pp)([^a-z0-9]|$)|%", re.IGNORECASE)


def is_percent_key(key: str) -> bool:
    """Whether a metadata key names a percentage (:data:`_PERCENT_KEY`)."""
    return bool(_PERCENT_KEY.search(str(key)))


def rounded_metadata(md: Mapping[str, Any]) -> dict:
    """``md`` with every float metadata value rounded by :func:`display_float` (a percentage when
    :func:`is_percent_key`); every other value as it is."""
    return {
        k: dg.MetadataValue.float(display_float(v.value, is_percent_key(k)))
        if isinstance(v, dg.FloatMetadataValue) and v.value is not None
        else v
        for k, v in md.items()
    }


def validated_output(
    model: type[pa.DataFrameModel], df: pd.DataFrame, table: str, metadata: dict | None = None
) -> dg.Output:
    """Validate ``df`` (a failure raises and nothing is written) and wrap it with standard metadata;
    float metadata is rounded for display (:func:`rounded_metadata`)."""
    df = validate_frame(model, df, table)
    md = {
        "dagster/row_count": dg.MetadataValue.int(len(df)),
        "preview": preview_md(df),
        "dagster/column_schema": schema_md(model).value,
    }
    md.update(metadata or {})
    return dg.Output(df, metadata=rounded_metadata(md))


#: Hex digits of a group of a registry fingerprint as metadata shows it: the 64 digits in one run
#: (480 px) would not wrap and would push the value column past the pane; groups of 16 (120 px) wrap.
FINGERPRINT_GROUP = 16


def fingerprint_md(fingerprint: str) -> dg.MetadataValue:
    """A registry fingerprint (64 hex digits) as a text entry that fits the metadata pane: groups of
    :data:`FINGERPRINT_GROUP` digits separated by spaces (:func:`fingerprint_of` reads it back)."""
    fp = str(fingerprint)
    return dg.MetadataValue.text(" ".join(fp[i : i + FINGERPRINT_GROUP] for i in range(0, len(fp), FINGERPRINT_GROUP)))


def fingerprint_of(value: Any) -> str:
    """The fingerprint of a :func:`fingerprint_md` entry's value (or of one recorded whole): its
    digits without the spaces."""
    return "".join(str(value).split())


def generation_metadata(df: pd.DataFrame, stats, spec, by: str | None = None, plan=None) -> dict:
    """Materialization metadata of a generation table, the same in every study.

    ``df`` has the runner's generation columns (``error``, ``finish_reason``); ``stats`` is the
    metamorph.runner.RunStats of the run and ``spec`` the registry entry. Gives model calls,
    cache hits, error and truncated rows (and the truncation % per value of column ``by``), tokens
    (called and served from the cache), model-version changes the provider reported, the
    distinct versions it reported (``reported_model_versions``, from the rows' ``model_version``),
    the seconds per call of this step when it made calls (``seconds_per_call``: elapsed since
    ``stats.started`` / calls, cache lookups included) and the ``registry_fingerprint`` (:func:`fingerprint_md`): the registry sensor compares both with the registry and the
    provider's ``models.list`` (:mod:`metamorph.providers.versions`); with ``plan`` (the step's
    :class:`~metamorph.costplan.CostPlan`) also :func:`plan_metadata`.
    """
    cut = df["finish_reason"] == "length"
    md = {
        "model_calls": dg.MetadataValue.int(stats.calls),
        "cache_hits": dg.MetadataValue.int(stats.cache_hits),
        "error_rows": dg.MetadataValue.int(int(df["error"].notna().sum())),
        "truncated_rows": dg.MetadataValue.int(int(cut.sum())),
    }
    if by is not None:
        md[f"truncation_pct_by_{by}"] = dg.MetadataValue.json((cut.groupby(df[by]).mean() * 100).round(1).to_dict())
    md.update(
        {
            "tokens": dg.MetadataValue.json(stats.tokens()),
            "model_version_changes": dg.MetadataValue.json(stats.version_changes),
            REPORTED_VERSIONS_KEY: reported_versions_md(df["model_version"]),
            "registry_fingerprint": fingerprint_md(spec.fingerprint()),
        }
    )
    if stats.calls:
        # this machine's pace for this model (the registry sensor and the empty states quote it)
        elapsed = time.monotonic() - stats.started
        md[SECONDS_PER_CALL_KEY] = dg.MetadataValue.float(float(f"{elapsed / stats.calls:.3g}"))
    if plan is not None:
        md.update(plan_metadata(plan))
    return md


#: Metadata key of a generation asset's seconds per model call in its run (elapsed / calls).
SECONDS_PER_CALL_KEY = "seconds_per_call"


#: Metadata key of a generation asset's distinct provider-reported model versions (a JSON list).
REPORTED_VERSIONS_KEY = "reported_model_versions"

#: Run tag of a re-evaluation after a provider version change (set by the registry sensor): an ISO
#: UTC instant; completions stored before it are called again (metamorph.runner.run_requests).
STALE_BEFORE_TAG = "metamorph/stale_before"


def runner_options(context) -> dict:
    """Keyword arguments of metamorph.runner.run_requests for a generation asset: its log lines go
    to the run's log, prefixed with the asset's name (a study has several generation steps), and
    what was cached before ``stale_before`` is called again: the later of the run tag
    ``metamorph/stale_before`` and, for a model partition, when its registry entry was first
    observed served by another provider version (:func:`assets.registry.provider_changed_at`).
    Raises ConfigError when the tag is not an ISO date-time."""
    from datetime import datetime, timezone

    from metamorph.errors import ConfigError

    tag = context.run.tags.get(STALE_BEFORE_TAG)
    stale_before = None
    if tag:
        try:
            t = datetime.fromisoformat(tag)
        except ValueError:
            raise ConfigError(f"run tag {STALE_BEFORE_TAG}={tag!r}: not an ISO date-time") from None
        stale_before = (t.astimezone(timezone.utc) if t.tzinfo else t).replace(tzinfo=None)
    if context.has_partition_key:
        from assets.registry import provider_changed_at

        changed = provider_changed_at(context.instance, context.partition_key)
        if changed is not None:
            context.log.info(
                f"{context.partition_key}: the provider serves another version since {changed} UTC; "
                "completions cached before are called again"
            )
            stale_before = changed if stale_before is None else max(stale_before, changed)
    step = context.asset_key.path[-1] if context.has_assets_def else context.op_def.name
    return {
        "log": lambda msg: context.log.info(f"{step}: {msg}"),
        "warn": context.log.warning,
        "stale_before": stale_before,
    }


def reported_versions_md(versions) -> dg.MetadataValue:
    """The distinct non-empty values of ``versions`` (an iterable of str or None; null = no reply),
    sorted, as a JSON metadata list (the set the registry sensor compares with ``models.list``)."""
    return dg.MetadataValue.json(sorted({str(v) for v in versions if v is not None and not pd.isna(v) and str(v)}))


#: The view of a study's schema naming the models its lineage views show (:func:`create_lineage_views`).
LINEAGE_MODELS = "lineage_models"


def _sql_text(v: str | None) -> str:
    return "NULL" if v is None else "'" + str(v).replace("'", "''") + "'"


def _lineage_models(con, schema: str) -> tuple[str, dict[str, dict]]:
    """The ``CREATE VIEW`` of ``<schema>.lineage_models`` — model_id, current (True: a model of the
    registry; its rows are shown), left_out (NULL, or why the model's rows are not shown, one line)
    — and the models left out (model id → :func:`resources.storage.last_run` with
    ``partition_removed``). Left out is every model whose per-model tables of ``schema`` hold rows
    (by the warehouse's write ledger) and that is not in the registry: removed from it, or a
    partition deleted with ``metamorph partitions --remove``, as the cross-model tables leave them
    out (:mod:`resources.storage`)."""
    from metamorph.models import load_registry
    from resources.paths import registry_path
    from assets.partitions import MODEL_PARTITIONS_NAME
    from resources.storage import LEDGER, last_run, left_out_line, table_exists

    registry = registry_path()
    ids = sorted(m.id for m in load_registry(registry))
    written: dict[str, list[str]] = {}
    if table_exists(con, *LEDGER.split(".")):
        for table, m in con.execute(
            f"SELECT table_name, partition FROM {LEDGER} WHERE starts_with(table_name, ?) AND partition <> '' "
            "ORDER BY table_name",
            [f"{schema}."],
        ).fetchall():
            if m not in ids:
                written.setdefault(m, []).append(table)
    left_out: dict[str, dict] = {}
    if written:
        instance = dg.AssetExecutionContext.get().instance
        partitions = set(instance.get_dynamic_partitions(MODEL_PARTITIONS_NAME))
        for m, tables in sorted(written.items()):
            keys = [dg.AssetKey(t.split(".")) for t in tables]
            left_out[m] = {**last_run(instance, keys, m), "partition_removed": m not in partitions}
    rows = [f"({_sql_text(m)}, TRUE, NULL)" for m in ids] + [
        f"({_sql_text(m)}, FALSE, {_sql_text(left_out_line(run, registry))})" for m, run in sorted(left_out.items())
    ]
    body = (
        "SELECT model_id::VARCHAR AS model_id, current::BOOLEAN AS current, left_out::VARCHAR AS left_out "
        f"FROM (VALUES {', '.join(rows)}) AS t(model_id, current, left_out)"
        if rows
        else "SELECT NULL::VARCHAR AS model_id, FALSE AS current, NULL::VARCHAR AS left_out WHERE FALSE"
    )
    return f'CREATE OR REPLACE VIEW "{schema}".{LINEAGE_MODELS} AS {body};\n', left_out


def create_lineage_views(warehouse, study: str, count_view: str, preview=None) -> dg.MaterializeResult:
    """Run ``sql/<study>/lineage_views.sql`` on the warehouse (``warehouse``: a DuckDBResource)
    and report the rows of ``<schema>.<count_view>`` and the SQL itself as metadata; with
    ``preview`` (an ``assets._cells.ViewPreview``) also the view's rows for a metric table's worst
    cell, so the views are queryable rows in the UI, not only SQL text.

    ``<schema>`` is the running asset's key prefix: the study's name for its default suite, the
    suite's name for another suite (:mod:`pipelines.components`), whose tables are in that schema;
    the SQL's ``<study>.`` qualifiers then read ``<suite>.``.

    The views show the registry's models only, as the cross-model tables do: the view
    ``<schema>.lineage_models`` (:func:`_lineage_models`), created first, names the registry's models
    (``current``) and the models whose rows are left out with why; each study's SQL reads its
    per-model tables through it. The models left out are named in the metadata (``left_out``,
    ``left_out_models``: :func:`resources.storage.left_out_metadata`)."""
    import re

    from metamorph.datasets import read_text
    from metamorph.sql import sql_path
    from resources.paths import registry_path
    from resources.storage import left_out_metadata

    from assets._cells import warehouse_schema

    schema = warehouse_schema(study)
    sql = read_text(sql_path(study, "lineage_views"), "SQL file")
    if schema != study:
        sql = re.sub(rf"\b{re.escape(study)}\.", f"{schema}.", sql)
    with warehouse.get_connection() as con:
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        models_sql, left_out = _lineage_models(con, schema)
        con.execute(models_sql)
        con.execute(sql)
        n = con.execute(f'SELECT count(*) FROM "{schema}"."{count_view}"').fetchall()[0][0]
        shown = preview.metadata(con, schema) if preview is not None else {}
    return dg.MaterializeResult(
        metadata={
            f"{count_view}_rows": dg.MetadataValue.int(int(n)),
            **shown,
            **left_out_metadata(left_out, registry_path()),
            "sql": dg.MetadataValue.md(f"```sql\n{models_sql}\n{sql}\n```"),
        }
    )


def metric_table(
    study: str,
    name: str,
    compute: Callable[..., pd.DataFrame],
    model: type[pa.DataFrameModel],
    *,
    ins: Sequence[str],
    row: str,
    source: str | None = None,
    config: type[dg.Config] | None = None,
    config_args: Sequence[str] = (),
    kwargs: Mapping[str, Any] | None = None,
    prepare: Mapping[str, Callable[..., Any]] | None = None,
    rows: Mapping[str, Callable[..., pd.DataFrame]] | None = None,
    not_estimated: Callable[..., Mapping[str, Any]] | None = None,
    metadata: Callable[[pd.DataFrame], dict] | None = None,
    inputs_metadata: Callable[[Mapping[str, pd.DataFrame]], dict] | None = None,
    cells=None,
    checks: bool = True,
    behind_ins: Sequence[str] = (),
    kinds: Sequence[str] = ("duckdb",),
    sql: Sequence[str] = (),
    partition_arg: str | None = None,
) -> dg.AssetsDefinition:
    """The one declaration of a metric table: asset ``<study>/<name>`` = ``compute(*inputs)``
    validated against ``model``.

    A metric table's body is always the same: load its upstream tables, make one library call
    (a function of ``metamorph.studies.<study>``, or one that runs a SQL file of ``sql/<study>/``)
    and hand the frame to :func:`assets._cells.metric_output` (or :func:`validated_output`)
    with its metadata. This declares it in one call, with a uniform plain-text description: what
    a row is (``row``), the paper section it reproduces (``source``) and the function that
    computes it — ``Code: <compute.__module__>.<compute.__qualname__>`` and, for a set-based
    table, the SQL files it runs — derived, never typed, so the path from the asset to its code is
    one hop and cannot drift.

    Args:
        ins: upstream asset names in the same study; after ``prepare`` they are ``compute``'s
            positional arguments, in this order. An upstream per-model table is read whole (every
            model partition).
        row, source: the description's first sentence (what a row is, ending in ".") and the
            paper section ("§5.1", "Table 3", …); ``source=None`` leaves the Source clause out.
        config: a Dagster config class (launchpad settings of the table, e.g. the extraction
            mode); with it, every ``prepare`` and ``rows`` hook is called as ``hook(frame, config)``.
        config_args: fields of ``config`` passed to ``compute`` as keyword arguments of the same name.
        kwargs: fixed keyword arguments of ``compute`` (e.g. ``n_resamples=1000, seed=0``).
        prepare: input name → its projection into ``compute``'s argument (e.g. the study's
            metric-input projection, the cells of one extraction mode).
        rows: input name → the frame the worst cells' rows behind (``cells.behind``) read instead
            of the input as loaded (e.g. the answers of the mode the table was computed in).
        not_estimated: when ``compute`` raises ValueError (a design that does not identify the
            estimate), the table is one row of ``model`` with every estimate null and
            ``note = "not estimated: <error>"``; this hook gives that row's known columns, called as
            ``not_estimated(args, inputs, config)`` (``compute``'s positional arguments, the
            loaded inputs, the config or None). Without it the error propagates.
        metadata: extra materialization metadata from the computed frame (plots, pivots, …).
        inputs_metadata: extra materialization metadata from the loaded inputs.
        cells: how the table's cells are read in the UI (``assets._cells.Cells``): worst cells
            with the rows behind them, headline floats, value checks.
        checks: False = no asset checks (the frame is only validated: :func:`validated_output`);
            True = ``assets._cells.metric_checks`` of ``cells``.
        behind_ins: further upstream assets loaded only to find the rows behind the worst cells.
        kinds: the asset's kinds ("sql" is added with ``sql``).
        sql: names of the files of ``sql/<study>/`` that ``compute`` runs (each must exist,
            else FileNotFoundError at declaration); the Code pointer lists them after the function.
        partition_arg: the table is per model (the model partitions, stored by ``model_id``) and
            ``compute`` receives the run's model partition key as this keyword argument.

    Raises (when the run executes): whatever ``compute`` raises (ValueError with the file, row or
    column it names), pandera's SchemaError when the frame breaks ``model`` — nothing is written.
    """
    from assets._cells import metric_checks, metric_output
    from assets.partitions import PER_MODEL, model_partitions

    from assets._cells import DECLARED

    if cells is not None:
        DECLARED[dg.AssetKey([study, name])] = cells

    prepare, rows, fixed = dict(prepare or {}), dict(rows or {}), dict(kwargs or {})
    from metamorph.sql import sql_path

    code = f"{compute.__module__}.{compute.__qualname__}"
    if sql:
        code += f" ({', '.join(f'sql/{study}/{sql_path(study, n).name}' for n in sql)})"
    behind = getattr(cells, "behind", None)
    uses_warehouse = behind is not None and behind.table is not None
    all_ins = list(dict.fromkeys([*ins, *behind_ins]))
    if config is None and config_args:
        raise TypeError(f"{study}/{name}: config_args need a config class")
    unknown = set(prepare) - set(ins) | set(rows) - set(all_ins)
    if unknown:
        raise TypeError(f"{study}/{name}: hooks name inputs it does not read: {sorted(unknown)}")

    def hook(fn, frame, cfg):
        return fn(frame, cfg) if config is not None else fn(frame)

    def body(context, cfg, inputs: dict[str, pd.DataFrame]):
        args = tuple(hook(prepare[i], inputs[i], cfg) if i in prepare else inputs[i] for i in ins)
        keywords = {**fixed, **{f: getattr(cfg, f) for f in config_args}}
        if partition_arg is not None:
            keywords[partition_arg] = context.partition_key
        try:
            df = compute(*args, **keywords)
        except ValueError as exc:
            if not_estimated is None:
                raise
            df = _not_estimated(model, exc, **not_estimated(args, inputs, cfg))
        md = {**(metadata(df) if metadata else {}), **(inputs_metadata(inputs) if inputs_metadata else {})}
        if not checks:
            yield validated_output(model, df, name, md or None)
            return
        behind_rows = {i: hook(rows[i], inputs[i], cfg) if i in rows else inputs[i] for i in all_ins}
        yield from metric_output(
            model,
            df,
            study,
            name,
            cells,
            inputs=behind_rows,
            warehouse=context.resources.warehouse if uses_warehouse else None,
            metadata=md or None,
        )

    if config is None:

        def _table(context, **inputs: pd.DataFrame):
            yield from body(context, None, inputs)

    else:

        def _table(context, config, **inputs: pd.DataFrame):
            yield from body(context, config, inputs)

        _table.__annotations__["config"] = config

    return dg.asset(
        name=name,
        key_prefix=[study],
        group_name=study,
        pool="duckdb",
        kinds={*kinds, *(["sql"] if sql else [])},
        ins={i: dg.AssetIn(key=[study, i]) for i in all_ins},
        required_resource_keys={"warehouse"} if uses_warehouse else set(),
        check_specs=metric_checks(study, name, cells) if checks else None,
        partitions_def=model_partitions if partition_arg is not None else None,
        metadata=PER_MODEL if partition_arg is not None else None,
        description=f"{row}{f' Source: {source}.' if source else ''} Code: {code}.",
    )(_table)


def _not_estimated(model: type[pa.DataFrameModel], exc: Exception, **known) -> pd.DataFrame:
    """One row of ``model`` with the ``known`` columns, every other column null and the reason in ``note``."""
    df = pd.DataFrame([{**known, "note": f"not estimated: {exc}"}])
    return df.reindex(columns=list(model.to_schema().columns))


class ComparisonConfig(dg.Config):
    """Settings of a study's ``model_comparison`` (upgrade verdicts)."""

    alpha: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="Family-wise level of the verdicts (Holm over every metric × slice of a candidate); 0 < alpha < 1.",
    )
    n_resamples: int = Field(
        default=2000, ge=100, description="Paired bootstrap resamples of the difference's CI (N ≥ 100)."
    )
    seed: int = Field(default=0, description="Seed of the bootstrap (and of a Monte Carlo permutation test).")
    power: float = Field(
        default=0.8,
        gt=0,
        lt=1,
        description="Power of the minimum detectable effect (mde) of every row; 0 < power < 1.",
    )


def comparison_checks(study: str) -> list[dg.AssetCheckSpec]:
    """The check beside a study's ``model_comparison`` (:data:`metamorph.verdict.REGRESSION_CHECK`),
    severity ERROR when it fails. Not a Dagster ``blocking`` check: every model partition's job
    rebuilds the verdicts of all candidates, so a blocking check would fail the run of any other
    model (and stop ``pipelines.run`` before the models after it) once one candidate regressed; the
    gate that fails is ``metamorph verdict`` (exit 1), and the report card's own check."""
    from metamorph.verdict import REGRESSION_CHECK

    return [
        dg.AssetCheckSpec(
            REGRESSION_CHECK,
            asset=dg.AssetKey([study, "model_comparison"]),
            description="Fails (ERROR) when a registry candidate regressed on a row after Holm on a "
            "metric that may block for it (registry blocking_metrics; default every "
            "compared metric); the metadata lists the regressed rows.",
        )
    ]


def comparison_output(
    study: str, models, scores: pd.DataFrame, directions: dict, config: ComparisonConfig, instance=None
):
    """``model_comparison`` of ``study``: every registry candidate with item scores against the
    approved baseline (:func:`metamorph.comparison.compare_models`), validated, with the verdict
    counts, the regressions-first markdown table and — when something is missing — the next step
    (:func:`metamorph.verdict.comparison_next_step`) as metadata; then the result of the
    :func:`comparison_checks` check (:func:`metamorph.verdict.regression_check`). Yields both.

    ``models``: the registry entries. Without exactly one approved entry the table is empty and
    the metadata says why (a study run with an unranked registry is not an error). With
    ``instance`` (the Dagster instance), a next step that names models to run also says what
    running them costs (:func:`assets.evaluations.planned_run`: calls, and for a local model about
    how long on this machine), in the entry ``planned`` and in the empty table's text.
    """
    from metamorph.comparison import COMPARISON_COLUMNS, compare_models, comparison_markdown, verdict_summary
    from metamorph.errors import ConfigError
    from metamorph.models import approved_baseline
    from metamorph.schemas import ModelComparison
    from metamorph.verdict import REGRESSION_CHECK, comparison_next_step, regression_check, regression_records

    evaluated = set(scores["model_id"])
    next_step = comparison_next_step(study, models, evaluated)
    try:
        baseline = approved_baseline(models).id
    except ConfigError as exc:
        df = pd.DataFrame(columns=COMPARISON_COLUMNS)
        md = {"baseline": dg.MetadataValue.text(f"none: {exc}")}
    else:
        candidates = [m.id for m in models if m.status == "candidate" and m.id in evaluated]
        df = compare_models(
            scores,
            baseline,
            directions,
            candidates=candidates,
            alpha=config.alpha,
            n_resamples=config.n_resamples,
            seed=config.seed,
            power=config.power,
        )
        shown = baseline if baseline in evaluated else f"{baseline} (not evaluated yet)"
        md = {
            "baseline": dg.MetadataValue.text(shown),
            "candidates_not_evaluated": dg.MetadataValue.json(
                [m.id for m in models if m.status == "candidate" and m.id not in evaluated]
            ),
            "verdicts": dg.MetadataValue.md(markdown_table(verdict_summary(df)) if len(df) else "_none_"),
        }
    planned = None
    if next_step and instance is not None:
        from assets.evaluations import planned_run
        from metamorph.study import studies

        try:
            baseline = approved_baseline(models).id
        except ConfigError:
            baseline = None
        to_run = [m for m in models if m.id not in evaluated and (m.status == "candidate" or m.id == baseline)]
        planned = planned_run(instance, studies()[study], to_run) if to_run else None
    empty = f"_no comparison: {next_step}_" + (f"\n\n_planned, nothing cached: {planned}_" if planned else "")
    md["comparison"] = dg.MetadataValue.md(comparison_markdown(df) if len(df) else empty)
    if next_step:
        md["next_step"] = dg.MetadataValue.text(next_step)
    if planned:
        md["planned"] = dg.MetadataValue.text(f"nothing cached: {planned}")
    yield validated_output(ModelComparison, df, "model_comparison", md)
    check = regression_check(df, models, study)
    check_md = {
        "summary": dg.MetadataValue.text(check.summary if len(df) else f"nothing compared: {next_step}"),
        "regressed_rows": dg.MetadataValue.json(regression_records(check.blocking)),
        "regressed_candidates": dg.MetadataValue.json(sorted(set(check.blocking["candidate_id"]))),
    }
    if len(check.blocking):
        check_md["regressions"] = dg.MetadataValue.md(comparison_markdown(check.blocking))
    if len(check.not_blocking):
        check_md["regressed_rows_not_blocking"] = dg.MetadataValue.json(regression_records(check.not_blocking))
    yield dg.AssetCheckResult(
        check_name=REGRESSION_CHECK, passed=check.passed, severity=dg.AssetCheckSeverity.ERROR, metadata=check_md
    )
