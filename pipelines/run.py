"""Command line: materialize a study on a persistent Dagster instance and print its headline table.

    python -m pipelines.run format_robustness                       # embedded default
    python -m pipelines.run format_robustness \\
        --source medqa:../shared/datasets/medqa/sample.jsonl --limit 50 --k 3
    python -m pipelines.run wrapper_sensitivity                     # synthetic tasks, 5 seeds
    python -m pipelines.run wrapper_sensitivity --source boolq:../shared/datasets/boolq/sample.jsonl \\
        --limit 50 --seeds 0

Runs show up in the UI (``make ui``) because the same ``DAGSTER_HOME`` (default
``data/dagster_home``) is used. Every registry model is registered as a partition and run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

DAGSTER_YAML = """\
# Written by pipelines.run. Every asset that writes the DuckDB warehouse is in the pool 'duckdb'.
concurrency:
  pools:
    granularity: op
    default_limit: 1
telemetry:
  enabled: false
"""


def ensure_dagster_home() -> Path:
    """Use ``$DAGSTER_HOME`` or ``<METAMORPH_HOME>/dagster_home``; write dagster.yaml if missing."""
    from resources.paths import data_dir

    home = Path(os.environ.get("DAGSTER_HOME") or data_dir() / "dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        cfg.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def print_format_robustness(database: str) -> None:
    import duckdb
    import pandas as pd

    con = duckdb.connect(database, read_only=True)
    try:
        mrv = con.execute(
            "SELECT workflow_id, dataset, relation, round(violation_pct, 1) AS pct, "
            "round(ci_low_pct, 1) AS ci_low, round(ci_high_pct, 1) AS ci_high, n_instances "
            "FROM format_robustness.mr_violations ORDER BY workflow_id, dataset, relation").df()
        acc = con.execute(
            "SELECT workflow_id, dataset, format, round(accuracy_pct, 1) AS accuracy_pct, n, n_unparseable "
            "FROM format_robustness.accuracy_by_format ORDER BY workflow_id, dataset, "
            "CASE format WHEN 'txt' THEN 0 WHEN 'md' THEN 1 WHEN 'json' THEN 2 WHEN 'csv' THEN 3 ELSE 4 END, format").df()
        outcomes = con.execute(
            "SELECT workflow_id, dataset, coalesce(decision, '⊥ (' || parse_reason || ')') AS outcome, count(*) AS n "
            "FROM format_robustness.extracted_decisions GROUP BY ALL ORDER BY workflow_id, dataset, n DESC").df()
    finally:
        con.close()
    rows = []
    for (workflow, dataset), g in mrv.groupby(["workflow_id", "dataset"], sort=True):
        row = {"workflow_id": workflow, "dataset": dataset, "n_instances": int(g["n_instances"].iloc[0])}
        for r in g.itertuples():
            ci = "" if r.ci_low is None or r.ci_low != r.ci_low else f" [{r.ci_low}, {r.ci_high}]"
            row[f"M{r.relation[-1]} %"] = f"{r.pct:.1f}{ci}"
        rows.append(row)
    print("\nMetamorphic-relation violations, % of instances (M1 decision, M2 evidence, M3 stability), "
          "bootstrap 95% CI:")
    print(pd.DataFrame(rows).to_markdown(index=False))
    print("\nAccuracy by format (%):")
    print(acc.to_markdown(index=False))
    print("\nWhat the model answered (all formats and repeats; ⊥ = unparseable, with the reason) — read the "
          "rates above against it: a model that always gives the same answer cannot violate MR1:")
    print(outcomes.to_markdown(index=False))


def print_wrapper_sensitivity(database: str) -> None:
    import duckdb

    con = duckdb.connect(database, read_only=True)
    try:
        fsi = con.execute(
            "SELECT model_id, task, round(fsi_pp, 1) AS FSI_pp, round(psi_pp, 1) AS PSI_pp, round(nfsi, 3) AS nFSI, "
            "round(nfsi_chance, 3) AS nFSI_chance, best_wrapper, worst_wrapper "
            "FROM wrapper_sensitivity.fsi_psi ORDER BY model_id, task").df()
        means = con.execute(
            "SELECT model_id, \"index\", round(mean, 2) AS mean, round(ci_low, 2) AS ci_low, "
            "round(ci_high, 2) AS ci_high, n_tasks, ci_note FROM wrapper_sensitivity.mean_fsi_psi "
            "ORDER BY model_id, \"index\"").df()
        dec = con.execute(
            "SELECT model_id, task, round(fsi_pp, 1) AS FSI_pp, round(compliance_pp, 1) AS compliance_pp, "
            "round(conditional_pp, 1) AS conditional_pp, note FROM wrapper_sensitivity.fsi_decomposition "
            "ORDER BY model_id, task").df()
    finally:
        con.close()
    print("\nFSI / PSI per model and task (normalized extraction, percentage points):")
    print(fsi.to_markdown(index=False))
    print("\nMean indices per model, bootstrap 95% CI over tasks (10,000 resamples):")
    print(means.to_markdown(index=False))
    print("\nFSI decomposition (compliance vs conditional accuracy):")
    print(dec.to_markdown(index=False))


def print_workflow_perturb(database: str) -> None:
    import duckdb

    con = duckdb.connect(database, read_only=True)
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                            "WHERE table_schema = 'workflow_perturb'").fetchall()}
        rejected = con.execute("SELECT golden_id, rejection_reason FROM workflow_perturb.goldens "
                               "WHERE NOT valid ORDER BY golden_id").df()
        n_goldens = con.execute("SELECT count(*) FROM workflow_perturb.goldens").fetchall()[0][0]
        means = con.execute(
            "SELECT type, severity, count(*) AS n, round(avg(chain_f1), 3) AS chain_f1, round(avg(graph_f1), 3) "
            "AS graph_f1, round(avg(bleu), 3) AS bleu, round(avg(gleu), 3) AS gleu, round(avg(bertscore_f1), 3) "
            "AS bertscore_f1, round(avg(kendall_tau), 3) AS kendall_tau "
            "FROM workflow_perturb.perturbation_scores GROUP BY ALL ORDER BY type, severity").df()
        sens = con.execute("SELECT metric, type, round(mean_10, 3) AS s10, round(mean_30, 3) AS s30, "
                           "round(mean_50, 3) AS s50, round(delta_avg, 3) AS delta_avg, round(delta_1, 3) AS delta_1, "
                           "round(delta_2, 3) AS delta_2, n_10 FROM workflow_perturb.sensitivity_matrix "
                           "WHERE operator = 'deterministic' AND n_10 > 0 ORDER BY type, metric").df() \
            if "sensitivity_matrix" in tables else None
    finally:
        con.close()
    print(f"\nGoldens: {n_goldens - len(rejected)} valid, {len(rejected)} rejected (kept in workflow_perturb.goldens)")
    if len(rejected):
        print(rejected.head(20).to_markdown(index=False))
    print("\nMean metric by perturbation type and severity (deterministic operators):")
    print(means.to_markdown(index=False))
    if sens is not None:
        print("\nSensitivity matrix (Δ_avg = 2.5·[s̄(10%) − s̄(50%)]):")
        print(sens.to_markdown(index=False))


STUDY_OPS = {
    # study: (inputs op, model op, printer)
    "format_robustness": ("format_robustness__source_instances", "format_robustness__workflow_generations",
                          print_format_robustness),
    "wrapper_sensitivity": ("wrapper_sensitivity__qa_items", "wrapper_sensitivity__wrapper_generations",
                            print_wrapper_sensitivity),
    "workflow_perturb": ("workflow_perturb__goldens", "workflow_perturb__llm_perturbations", print_workflow_perturb),
}


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def failure_message(result) -> str:
    """The innermost error of a failed run's first failed step, as one line (file, row, field)."""
    events = result.get_step_failure_events()
    if not events:
        return "the run failed before any step ran"
    err = events[0].event_specific_data.error
    while err.cause is not None:
        err = err.cause
    return f"{events[0].step_key}: {err.message.strip().splitlines()[0] if err.message.strip() else err.cls_name}"


QUIET = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", choices=sorted(STUDY_OPS))
    ap.add_argument("--source", action="append", dest="sources",
                    help="source spec (repeatable); default: the study's embedded default")
    ap.add_argument("--limit", type=_positive, default=None, help="first N rows of each source (>= 1)")
    ap.add_argument("--k", type=_positive, default=None, help="format study: repeats per document (default 3)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="wrapper study: sampling seeds (default 0..4)")
    ap.add_argument("--constrained-arm", action="store_true", help="wrapper study: add constrained json decoding")
    ap.add_argument("--llm-goldens", type=int, default=None,
                    help="workflow study: goldens sent to the LLM generator (default 3)")
    ap.add_argument("--no-models", action="store_true", help="only the inputs job (no model calls)")
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--models", nargs="*", default=None, help="registry model ids (default: all)")
    args = ap.parse_args(argv)

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    ensure_dagster_home()
    import dagster as dg

    from metamorph.errors import MetamorphError
    from metamorph.models import load_registry
    from pipelines.definitions import defs
    from pipelines.partitions import model_partitions
    from resources.llm import build_provider
    from resources.paths import registry_path, warehouse_path

    instance = dg.DagsterInstance.get()
    try:
        specs = {m.id: m for m in load_registry(registry_path())}
        models = list(specs)
        if args.models:
            unknown = set(args.models) - set(models)
            if unknown:
                ap.error(f"unknown model id(s) {sorted(unknown)}; registry has {models}")
            models = args.models
        if not args.no_models:  # fail before anything is written: keys present, model files found
            for m in models:
                build_provider(specs[m])
    except MetamorphError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    missing = [m for m in models if not instance.has_dynamic_partition(model_partitions.name, m)]
    if missing:
        instance.add_dynamic_partitions(model_partitions.name, missing)

    t0 = time.monotonic()
    inputs_op, model_op, printer = STUDY_OPS[args.study]
    src_cfg = {"limit": args.limit, **({"sources": args.sources} if args.sources else {})}
    inputs = defs.resolve_job_def(f"{args.study}_inputs_job").execute_in_process(
        instance=instance, raise_on_error=False, run_config={"ops": {inputs_op: {"config": src_cfg}}, **QUIET})
    if not inputs.success:
        print(f"error: {failure_message(inputs)}", file=sys.stderr)
        return 1
    gen_cfg = {"max_tokens": args.max_tokens}
    if args.study == "format_robustness":
        gen_cfg["k"] = args.k
    elif args.study == "workflow_perturb":
        gen_cfg = {"n_goldens": args.llm_goldens} if args.llm_goldens else {}
    else:
        gen_cfg.update({"seeds": args.seeds, "constrained_arm": args.constrained_arm or None})
    gen_cfg = {k: v for k, v in gen_cfg.items() if v is not None}
    for m in ([] if args.no_models else models):
        res = defs.resolve_job_def(f"{args.study}_model_job").execute_in_process(
            instance=instance, partition_key=m, raise_on_error=False,
            run_config={"ops": {model_op: {"config": gen_cfg}}, **QUIET})
        if not res.success:
            print(f"error (model {m}): {failure_message(res)}", file=sys.stderr)
            return 1
    if args.no_models and args.study != "workflow_perturb":
        print(f"\nInputs materialized ({args.study}); no model was run, so there are no new metric tables.")
    else:
        printer(warehouse_path())
    print(f"\nDone in {time.monotonic() - t0:.0f}s. Warehouse: {warehouse_path()}  "
          f"UI: make ui  (DAGSTER_HOME={os.environ['DAGSTER_HOME']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
