"""Every metric asset of every study on synthetic generation tables at 10%, 30% and 100% of the
papers' scale: wall time, time per 10k generations and peak RSS.

    nice -n 10 .venv/bin/python benchmarks/metric_scale.py [--studies format_robustness,...]
                                                           [--fractions 0.1,0.3,1.0]

For each study and fraction two child processes run, one after the other:

1. ``prepare`` builds the synthetic upstream tables (:mod:`synthetic_tables`: real loaders and
   renderers for the inputs, seeded synthetic replies for the generations), validates them
   against their pandera schemas and writes them into a fresh DuckDB warehouse exactly where the
   IO manager would (``<study>.<asset>``, per-model tables keyed by ``model_id``). Not timed.
2. ``run`` materializes the study's metric assets in-process with Dagster
   (``pipelines.definitions``: the real assets, the real ``SafeDuckDBPandasIOManager``,
   pandera validation, metadata and plots) on that warehouse: per-model assets once per model
   partition, cross-model tables once, in dependency waves. A generation table that depends on
   a metric (format routing's ``routed_generations`` on ``routing_choice``) is written,
   untimed, when its parents are done. Per-asset times come from the run's step events; peak
   RSS is the child's ``ru_maxrss`` (imports included: the "base" column is RSS before the
   first run).

Prints one line per study × fraction (wall time and the child's CPU time, all its threads; on a
busy machine the CPU time is the number to compare, the wall time an upper bound), the growth of
the time per 10k rows (largest ÷ smallest fraction: 1.0 is linear) and the slowest assets at the
largest fraction. Targets: linear growth, < 60 s and < 2 GB at paper scale.
A measurement, not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import load_line

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

#: per study: the tables written before the run (synthetic generations and their inputs), the
#: generation tables written when their parents are done, and assets that are neither metrics
#: nor needed by one (operators, LLM generators, the encoder scoring of workflow_scoring.py, and
#: the lineage views where they join tables the benchmark does not write).
STUDIES = {
    "format_robustness": {
        "prefill": ["source_instances", "rendered_documents", "workflow_generations"],
        "lazy": ["routed_generations"],
        "skip": [],
    },
    "wrapper_sensitivity": {
        "prefill": ["qa_items", "wrapper_generations"],
        "lazy": [],
        "skip": ["wrapped_prompts", "lineage_views"],
    },
    "workflow_perturb": {
        "prefill": ["perturbation_scores", "judge_scores"],
        "lazy": [],
        "skip": ["goldens", "perturbations", "perturbations_llm", "perturbation_scores_llm", "lineage_views"],
    },
    "order_probe": {
        "prefill": ["order_items", "scrambled_inputs", "order_prompts", "order_generations"],
        "lazy": [],
        "skip": [],
    },
}
#: the table whose rows are "the rows" of a study (time per 10k rows)
ROWS = {
    "format_robustness": "workflow_generations",
    "wrapper_sensitivity": "wrapper_generations",
    "workflow_perturb": "perturbation_scores",
    "order_probe": "order_generations",
}


def _models(study: str) -> list[str]:
    import synthetic_tables as st

    return {
        "format_robustness": st.FORMAT_MODELS,
        "wrapper_sensitivity": list(st.WRAPPER_MODELS),
        "workflow_perturb": ["bench-judge"],
        "order_probe": st.ORDER_MODELS,
    }[study]


def _write(db: str, study: str, tables: dict) -> None:
    import duckdb

    con = duckdb.connect(db)
    try:
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{study}"')
        for name, df in tables.items():
            con.register("__bench", df)
            con.execute(f'CREATE OR REPLACE TABLE "{study}"."{name}" AS SELECT * FROM __bench')
            con.unregister("__bench")
    finally:
        con.close()


def prepare(study: str, fraction: float, home: str) -> dict:
    """Build, validate and write the upstream tables; return ``{"rows": ..., "setup_s": ...}``."""
    import pandas as pd
    import synthetic_tables as st

    t0 = time.perf_counter()
    db = str(Path(home) / "metamorph.duckdb")
    models = _models(study)
    if study == "format_robustness":
        tables = st.format_inputs(fraction)
        tables["workflow_generations"] = pd.concat(
            [st.format_generations(tables, m, i) for i, m in enumerate(models)], ignore_index=True
        )
    elif study == "wrapper_sensitivity":
        tables, items, prompts = st.wrapper_inputs(fraction)
        tables["wrapper_generations"] = pd.concat(
            [st.wrapper_generations(items, prompts, m, i) for i, m in enumerate(models)], ignore_index=True
        )
    elif study == "workflow_perturb":
        tables = st.workflow_tables(fraction)
    else:
        tables = st.order_inputs(fraction)
        tables["order_generations"] = pd.concat(
            [st.order_generations(tables, m, i) for i, m in enumerate(models)], ignore_index=True
        )
    _write(db, study, tables)
    return {"rows": len(tables[ROWS[study]]), "setup_s": time.perf_counter() - t0}


def _lazy_tables(study: str, name: str, home: str) -> dict:
    """Generation tables that depend on a metric table (read back from the warehouse)."""
    import duckdb
    import pandas as pd
    import synthetic_tables as st

    con = duckdb.connect(str(Path(home) / "metamorph.duckdb"), read_only=True)
    try:
        read = lambda t: con.execute(f'SELECT * FROM "{study}"."{t}"').df()  # noqa: E731
        inputs = {"source_instances": read("source_instances"), "rendered_documents": read("rendered_documents")}
        choice = read("routing_choice")
    finally:
        con.close()
    assert name == "routed_generations", name
    best = {(r.workflow_id, r.dataset): r.best_format for r in choice.itertuples()}
    return {
        name: pd.concat(
            [st.format_generations(inputs, m, 100 + i, routed=best) for i, m in enumerate(_models(study))],
            ignore_index=True,
        )
    }


def _step_times(instance, run_id: str) -> dict[str, float]:
    import dagster as dg

    start, out = {}, {}
    for e in instance.all_logs(run_id):
        ev = e.dagster_event
        if ev is None or ev.step_key is None:
            continue
        if ev.event_type == dg.DagsterEventType.STEP_START:
            start[ev.step_key] = e.timestamp
        elif ev.event_type == dg.DagsterEventType.STEP_SUCCESS:
            out[ev.step_key] = e.timestamp - start[ev.step_key]
    return out


def _wave(graph, remaining: set, done: set, partitioned: bool) -> list:
    wave: list = []
    grew = True
    while grew:
        grew = False
        for k in sorted(remaining - set(wave)):
            node = graph.get(k)
            if (node.partitions_def is not None) == partitioned and node.parent_keys <= done | set(wave):
                wave.append(k)
                grew = True
    return wave


def run(study: str, home: str) -> dict:
    """Materialize every metric asset of ``study`` on the prepared warehouse (module docstring)."""
    os.environ["METAMORPH_HOME"] = home
    import dagster as dg

    from pipelines.definitions import build_definitions

    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    cfg = STUDIES[study]
    keys = {k for k in graph.get_all_asset_keys() if k.path[0] == study}
    done = {dg.AssetKey([study, n]) for n in cfg["prefill"]}
    lazy = {dg.AssetKey([study, n]) for n in cfg["lazy"]}
    metric = keys - done - lazy - {dg.AssetKey([study, n]) for n in cfg["skip"]}
    models = _models(study)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times: dict[str, float] = {}
    untimed = untimed_cpu = 0.0
    t0, c0 = time.perf_counter(), time.process_time()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", models)
        remaining = set(metric)
        while remaining or lazy:
            for k in [k for k in lazy if graph.get(k).parent_keys <= done]:
                t1, c1 = time.perf_counter(), time.process_time()
                _write(str(Path(home) / "metamorph.duckdb"), study, _lazy_tables(study, k.path[-1], home))
                untimed += time.perf_counter() - t1
                untimed_cpu += time.process_time() - c1
                lazy.discard(k)
                done.add(k)
            # per-model assets first (cross-model tables read all their partitions), each wave closed
            # under "all parents done or in the wave" so that one run per partition does it
            wave = _wave(graph, remaining, done, partitioned=True) or _wave(graph, remaining, done, partitioned=False)
            if not wave:
                raise RuntimeError(f"{study}: no asset is ready; left {sorted(map(str, remaining))}")
            part = graph.get(wave[0]).partitions_def is not None
            job = dg.define_asset_job(f"bench_{len(remaining)}", selection=dg.AssetSelection.assets(*wave))
            resolved = dg.Definitions.merge(defs, dg.Definitions(jobs=[job])).resolve_job_def(job.name)
            for pk in models if part else [None]:
                res = resolved.execute_in_process(instance=instance, partition_key=pk)
                for step, s in _step_times(instance, res.run_id).items():
                    times[step] = times.get(step, 0.0) + s
            done.update(wave)
            remaining -= set(wave)
    wall = time.perf_counter() - t0 - untimed
    cpu = time.process_time() - c0 - untimed_cpu
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "steps": times,
        "assets": sorted(k.path[-1] for k in metric),
        "base_rss_mb": base_rss,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _child(mode: str, study: str, fraction: float, home: str, profile: str | None = None) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__)),
        "--child",
        mode,
        "--studies",
        study,
        "--fractions",
        str(fraction),
        "--home",
        home,
        *(["--profile", profile] if profile and mode == "run" else []),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE), os.environ.get("PYTHONPATH", "")]),
        "OMP_WAIT_POLICY": "PASSIVE",
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{mode} {study} {fraction} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--studies", default=",".join(STUDIES))
    ap.add_argument("--fractions", default="0.1,0.3,1.0")
    ap.add_argument("--child", choices=["prepare", "run"])
    ap.add_argument("--home")
    ap.add_argument("--profile", help="directory: each run child writes cProfile stats <study>-<fraction>.prof there")
    args = ap.parse_args()
    studies = args.studies.split(",")
    fractions = [float(f) for f in args.fractions.split(",")]
    if args.child:
        os.environ["DAGSTER_HOME"] = args.home
        if args.child == "prepare":
            print(json.dumps(prepare(studies[0], fractions[0], args.home)))
            return
        prof = None
        if args.profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        out = run(studies[0], args.home)
        if prof is not None:
            prof.disable()
            prof.dump_stats(str(Path(args.profile) / f"{studies[0]}-{fractions[0]:g}.prof"))
        print(json.dumps(out))
        return

    print(load_line(), flush=True)
    print(
        f"{'study':<20} {'frac':>6} {'rows':>8} {'setup s':>8} {'wall s':>8} {'s/10k rows':>10} {'cpu s':>7} "
        f"{'cpu/10k':>8} {'base MB':>8} {'peak MB':>8}",
        flush=True,
    )
    results = {}
    for study in studies:
        for f in fractions:
            with tempfile.TemporaryDirectory(prefix="metamorph-scale-") as home:
                prep = _child("prepare", study, f, home)
                res = {**prep, **_child("run", study, f, home, args.profile)}
            res["per_10k"] = res["wall_s"] / res["rows"] * 1e4
            res["cpu_10k"] = res["cpu_s"] / res["rows"] * 1e4
            results[(study, f)] = res
            print(
                f"{study:<20} {f:>6.3f} {res['rows']:>8,} {res['setup_s']:>8.1f} {res['wall_s']:>8.1f} "
                f"{res['per_10k']:>10.2f} {res['cpu_s']:>7.1f} {res['cpu_10k']:>8.2f} {res['base_rss_mb']:>8.0f} "
                f"{res['peak_rss_mb']:>8.0f}",
                flush=True,
            )
    lo, hi = min(fractions), max(fractions)
    print(f"\ngrowth of s/10k rows, {hi:g} vs {lo:g} of paper scale (1.0 = linear); assets at {hi:g}:")
    for study in studies:
        a, b = results[(study, lo)], results[(study, hi)]
        slow = sorted(b["steps"].items(), key=lambda kv: -kv[1])[:4]
        print(
            f"  {study:<20} wall {b['per_10k'] / a['per_10k']:5.2f}, cpu {b['cpu_10k'] / a['cpu_10k']:5.2f}; "
            f"{len(b['assets'])} metric assets; slowest: "
            + ", ".join(f"{k.split('__', 1)[1]} {v:.1f}s" for k, v in slow)
        )
        if hi == 1.0:
            print(
                f"  {'':<20} paper scale {b['rows']:,} rows: {b['wall_s']:.1f} s (target < 60 s: "
                f"{'met' if b['wall_s'] < 60 else 'NOT met'}), peak {b['peak_rss_mb']:.0f} MB (target < 2048 MB: "
                f"{'met' if b['peak_rss_mb'] < 2048 else 'NOT met'})"
            )


if __name__ == "__main__":
    main()
