"""``metamorph run <study> --sequential``: generate in batches and stop a candidate once its verdict is certain.

The plan is the run without ``--sequential``: ``--limit`` items of each source (required). Item
counts below are per source (for one source, the items). The run grows ``--limit`` by ``--batch`` items at a time (the sources' seeded
order: a larger limit keeps the items of a smaller one, which is checked after every batch), runs
the inputs job and the model job of every model still generating, and re-tests each candidate
against the approved baseline with the anytime-valid test of :mod:`metamorph.sequential` on the
items so far (Holm over the candidate's blocking rows, α = 0.05, the ``model_comparison``
default). A candidate stops generating once every one of its blocking rows is decided; the
baseline stops once every candidate has; all stop when the plan is spent. Each batch's model job
asks the provider only for the new items: the calls of the earlier ones are in the generation
cache (same requests, same keys).

The calls saved are the plan's calls (:func:`metamorph.costplan.plan_calls` at the planned
limit, nothing cached) minus the calls of the items each model generated. The sequential rows
(:data:`metamorph.sequential.SEQUENTIAL_COLUMNS`, plus the items and calls) are written to
``metamorph_meta.sequential_runs`` in the warehouse (one set per study, replaced by the next
sequential run of the study), where ``metamorph verdict`` finds them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from metamorph.sequential import SEQUENTIAL_COLUMNS, extend_order, sequential_family

#: Items per batch unless ``--batch`` is given.
DEFAULT_BATCH = 20
#: Level and seed of the sequential test (those of every ``model_comparison``'s defaults).
ALPHA, SEED = 0.05, 0

#: Columns of ``metamorph_meta.sequential_runs``.
RUN_COLUMNS = [
    "study",
    *SEQUENTIAL_COLUMNS,
    "alpha",
    "batch",
    "plan_items",
    "stopped_after",
    "calls_planned",
    "calls_made",
    "calls_saved",
]


class SequentialError(Exception):
    """A ``--sequential`` run that cannot go on (bad input: exit 2, one line)."""


@dataclass
class ModelProgress:
    """One model in a sequential run: ``items`` generated so far, ``stopped`` once it needs no more
    (a candidate decided, or the baseline with every candidate stopped)."""

    model_id: str
    items: int = 0
    stopped: bool = False


def looks(plan_items: int, batch: int) -> list[int]:
    """The ``--limit`` of each batch: ``batch, 2·batch, …`` up to ``plan_items`` (the last one)."""
    if plan_items < 1 or batch < 1:
        raise ValueError(f"looks: need plan_items >= 1 and batch >= 1, got {plan_items}, {batch}")
    out = list(range(batch, plan_items, batch))
    return [*out, plan_items]


def sequential_parties(specs: Sequence, models: Sequence[str]) -> tuple[str, list[str]]:
    """``(approved baseline, candidates)`` among ``models`` (ids of the registry entries ``specs``).
    Raises :class:`SequentialError` when the registry has no single approved entry, it is not among
    ``models``, or no ``status: candidate`` entry is."""
    from metamorph.errors import ConfigError
    from metamorph.models import approved_baseline

    try:
        baseline = approved_baseline(list(specs)).id
    except ConfigError as exc:
        raise SequentialError(f"--sequential compares candidates with the approved baseline: {exc}") from None
    if baseline not in models:
        raise SequentialError(f"--sequential needs the approved baseline {baseline} among --models")
    status = {s.id: s.status for s in specs}
    candidates = [m for m in models if m != baseline and status.get(m) == "candidate"]
    if not candidates:
        raise SequentialError("--sequential needs a candidate (status: candidate) among --models")
    return baseline, candidates


def check_prefixes(study, options) -> int:
    """The plan's ``--limit`` (items per source), after checking that the sources at each batch's
    limit keep every item of the batch before (compared by value). Raises :class:`SequentialError`
    without ``--limit`` or naming the limit and the sources otherwise, and the loaders'
    :class:`~metamorph.errors.InputError`."""
    if options.limit is None:
        raise SequentialError("--sequential needs --limit N: the most items per source the run may generate (the plan)")
    plan_items = options.limit
    batch = options.batch or DEFAULT_BATCH
    before: set[str] = set()
    for limit in looks(plan_items, batch):
        now = {repr(x) for x in study.load(options.sources, limit, **{n: getattr(options, n) for n in study.sampling})}
        if not before <= now:
            raise SequentialError(
                f"--sequential: the sources ({', '.join(options.sources)}) at --limit {limit} drop items of --limit "
                f"{limit - batch}, so the batches would not grow; use a source whose larger samples keep the smaller "
                "ones (construct does; a file source's seeded sample does only for some sizes)"
            )
        before = now
    return plan_items


def at_limit(study, options, limit: int):
    """``options`` with ``limit`` in place of ``--limit``."""
    given = {name: getattr(options, name) for name in options.given}
    given["limit"] = limit
    return study.values(**given)


def read_scores(database: str, study_name: str) -> pd.DataFrame:
    """The item scores of every model in ``study_name`` from the warehouse (the tables and the
    function :func:`metamorph.verdict.sources` names); empty when a table is not written yet."""
    from metamorph.comparison import ITEM_SCORE_COLUMNS
    from metamorph.verdict import sources
    from pipelines.run import connect_read_only

    src = sources()[study_name]
    con = connect_read_only(database)
    try:
        frames = []
        for t in src.tables:
            n = con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
                [study_name, t],
            ).fetchone()[0]
            if not n:
                return pd.DataFrame(columns=ITEM_SCORE_COLUMNS)
            frames.append(con.execute(f'SELECT * FROM "{study_name}"."{t}"').df())
    finally:
        con.close()
    return src.scores(*frames)


def run_sequential(
    study,
    options,
    specs: dict,
    models: Sequence[str],
    run_job: Callable[[str, dict, str | None, bool], tuple[int, str] | None],
    database: str,
    say: Callable[[str], None] = print,
) -> tuple[tuple[int, str] | None, pd.DataFrame | None]:
    """The batches of a ``--sequential`` run (module docstring).

    Args:
        study: the :class:`metamorph.study.Study` (``study.sequential`` True).
        options: its :class:`metamorph.study.Options` (``--limit`` the plan, ``--batch``).
        specs: registry id -> :class:`~metamorph.models.ModelSpec`; ``models``: the ids run.
        run_job: ``(job, ops, partition, model_job) -> None | (exit code, message)`` (the run's own).
        database: the warehouse file.
        say: where the progress lines go.

    Returns:
        ``(failure or None, rows)``: ``rows`` are :data:`RUN_COLUMNS`, one per candidate × (metric,
        slice) at the candidate's last look (None when a job failed).

    Raises:
        SequentialError: no approved baseline or no candidate among ``models``; a larger limit that
            drops an item of a smaller one.
    """
    from metamorph.costplan import plan_calls
    from metamorph.verdict import blocks, sources
    from pipelines.jobs import split_ops

    directions = dict(sources()[study.name].directions)
    baseline, candidates = sequential_parties(list(specs.values()), models)
    plan_items = check_prefixes(study, options)
    batch = options.batch or DEFAULT_BATCH
    limits = looks(plan_items, batch)
    say(
        f"sequential: up to {plan_items} items in {len(limits)} batch(es) of {batch}; each candidate stops once an "
        f"anytime-valid test (α = {ALPHA:g}, Holm over its blocking rows) has decided every blocking row"
    )
    progress = {m: ModelProgress(m) for m in models}
    order: list[str] = []
    last: dict[str, pd.DataFrame] = {}
    for look, limit in enumerate(limits):
        opts = at_limit(study, options, limit)
        failed = run_job(f"{study.name}_inputs_job", study.inputs_ops(opts), None, False)
        if failed:
            return failed, None
        for m in models:
            if progress[m].stopped:
                continue
            failed = run_job(f"{study.name}_model_job", split_ops(study, study.model_ops(opts))[0], m, True)
            if failed:
                return (failed[0], f"(model {m}) {failed[1]}"), None
            progress[m].items = limit
        # the cross-model tables (the scores read below among them), once for the models of this look
        failed = run_job(f"{study.name}_tables_job", split_ops(study, study.model_ops(opts))[1], None, True)
        if failed:
            return failed, None
        scores = read_scores(database, study.name)
        scores = scores[scores["model_id"].isin(models)]
        present = set(scores.loc[scores["model_id"] == baseline, "item_id"].astype(str))
        lost = [i for i in order if i not in present]
        if lost:
            raise SequentialError(
                f"--sequential: the sources at --limit {limit} no longer hold item {lost[0]!r} of the batch before; "
                "use a source whose larger samples keep the smaller ones (construct, or a file source with "
                "--batch of at least 6)"
            )
        order = extend_order(order, present, SEED, look)
        for c in candidates:
            if progress[c].stopped:
                continue
            blocking = {m for m in directions if blocks(specs[c], study.name, m)}
            fam = sequential_family(scores, baseline, c, directions, order, alpha=ALPHA, blocking=blocking)
            last[c] = fam.table
            decided = int(fam.table["decided"].sum())
            n_block = int(fam.table["blocks"].sum())
            say(f"sequential: {c} after {limit} items: {decided} of {n_block} blocking rows decided")
            if fam.complete and limit < plan_items:
                progress[c].stopped = True
                say(f"sequential: {c} stops after {limit} of {plan_items} items (every blocking row decided)")
        if all(progress[c].stopped for c in candidates):
            progress[baseline].stopped = True
            break
    planned = at_limit(study, options, plan_items)
    rows = []
    for c in candidates:
        table = last.get(c)
        if table is None:
            continue
        spec = specs[c]
        calls_planned = plan_calls(study.name, spec, planned)[0]
        calls_made = plan_calls(study.name, spec, at_limit(study, options, progress[c].items))[0]
        t = table.assign(
            study=study.name,
            alpha=ALPHA,
            batch=batch,
            plan_items=plan_items,
            stopped_after=progress[c].items if progress[c].items < plan_items else None,
            calls_planned=calls_planned,
            calls_made=calls_made,
            calls_saved=calls_planned - calls_made,
        )
        rows.append(t[RUN_COLUMNS])
    out = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=RUN_COLUMNS)
    out["stopped_after"] = out["stopped_after"].astype("Int64")
    base = specs[baseline]
    base_planned = plan_calls(study.name, base, planned)[0]
    base_made = plan_calls(study.name, base, at_limit(study, options, progress[baseline].items))[0]
    out.attrs["baseline"] = (baseline, progress[baseline].items, base_planned, base_made)
    return None, out


def summary_lines(rows: pd.DataFrame) -> list[str]:
    """What the run prints about its sequential test: per candidate where it stopped and the calls
    saved, the decided rows, and the baseline's calls; ``rows`` as :func:`run_sequential` returns."""
    if rows.empty:
        return ["Sequential: no candidate was compared (no item scored for both models)."]
    first = rows.iloc[0]
    out = [
        f"Sequential (anytime-valid: mixture SPRT on discordant pairs for 0/1 items, betting e-process otherwise; "
        f"α = {first.alpha:g}, Holm over each candidate's blocking rows; batches of {first.batch} items, "
        f"plan {first.plan_items} items):"
    ]
    for c, g in rows.groupby("candidate_id", sort=True):
        r = g.iloc[0]
        where = (
            f"stopped after {r.stopped_after} of {r.plan_items} items (every blocking row decided)"
            if not pd.isna(r.stopped_after)
            else f"ran the whole plan of {r.plan_items} items"
        )
        block = g[g["blocks"]]
        decided = block[block["decided"]]
        verdicts = ", ".join(f"{v} {n}" for v, n in decided["verdict"].value_counts().sort_index().items())
        out.append(
            f"  {c}: {where}; {len(decided)} of {len(block)} blocking rows decided ({verdicts or 'none'}); "
            f"{r.calls_made} of {r.calls_planned} calls made, {r.calls_saved} saved"
        )
    base = rows.attrs.get("baseline")
    if base:
        b, items, planned, made = base
        out.append(
            f"  {b} (baseline): {items} of {first.plan_items} items; {made} of {planned} calls made, "
            f"{planned - made} saved"
        )
    return out


def write_runs(database: str, study_name: str, rows: pd.DataFrame) -> None:
    """Replace ``study_name``'s rows of ``metamorph_meta.sequential_runs`` with ``rows``
    (:data:`RUN_COLUMNS`), in one transaction."""
    import duckdb

    con = duckdb.connect(database)
    try:
        con.execute("CREATE SCHEMA IF NOT EXISTS metamorph_meta")
        frame = rows[RUN_COLUMNS].copy()  # noqa: F841 (read by DuckDB's replacement scan)
        con.execute("BEGIN")
        con.execute("CREATE TABLE IF NOT EXISTS metamorph_meta.sequential_runs AS SELECT * FROM frame LIMIT 0")
        con.execute("DELETE FROM metamorph_meta.sequential_runs WHERE study = ?", [study_name])
        con.execute("INSERT INTO metamorph_meta.sequential_runs SELECT * FROM frame")
        con.execute("COMMIT")
    finally:
        con.close()


def clear_runs(database: str, study_name: str) -> None:
    """Delete ``study_name``'s rows of ``metamorph_meta.sequential_runs`` (a run without
    ``--sequential`` replaced the items they describe); nothing when the table does not exist."""
    import duckdb

    con = duckdb.connect(database)
    try:
        n = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'metamorph_meta' "
            "AND table_name = 'sequential_runs'"
        ).fetchone()[0]
        if n:
            con.execute("DELETE FROM metamorph_meta.sequential_runs WHERE study = ?", [study_name])
    finally:
        con.close()


__all__ = [
    "DEFAULT_BATCH",
    "RUN_COLUMNS",
    "ModelProgress",
    "SequentialError",
    "at_limit",
    "check_prefixes",
    "clear_runs",
    "looks",
    "sequential_parties",
    "read_scores",
    "run_sequential",
    "summary_lines",
    "write_runs",
]
