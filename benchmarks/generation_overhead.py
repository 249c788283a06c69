"""Generation asset vs a bare loop of the same engine over the identical prompts, and the warm-cache rerun.

    .venv/bin/python benchmarks/generation_overhead.py [--n 4] [--k 1] [--engine xllamacpp|llama-cpp-python]

The bare loop sends the same messages and parameters straight to the engine with the provider's
settings (one context, one thread, every prompt from scratch): xllamacpp's
``Server.handle_chat_completions`` (``response_format`` as the provider's compact grammar), or llama-cpp-python's ``create_chat_completion`` after a KV
reset. The asset runs with one worker (``workers: 1``, a temporary registry), so both compute one
request at a time. Prints three wall times and two ratios (targets: cold/bare <= 1.05, warm/cold
<= 0.05). A measurement, not a test: nothing here asserts on time.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4, help="construct instances (x 4 formats)")
    ap.add_argument("--k", type=int, default=1, help="repeats")
    ap.add_argument("--engine", default="xllamacpp", help="xllamacpp or llama-cpp-python")
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="metamorph-bench-")
    os.environ["METAMORPH_HOME"] = home
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    import yaml

    from resources.paths import registry_path

    # the shipped default entry with one worker and the chosen engine, as a temporary registry
    entry = dict(yaml.safe_load(Path(registry_path()).read_text())["models"][0], workers=1)
    if args.engine != "xllamacpp":
        entry["params"] = {**entry.get("params", {}), "engine": args.engine}
    entry.pop("study_params", None)
    reg = Path(home) / "models.yaml"
    reg.write_text(yaml.safe_dump({"models": [entry]}))
    os.environ["METAMORPH_MODELS"] = str(reg)

    import dagster as dg

    from metamorph.models import load_registry
    from metamorph.providers.llama_cpp import LlamaCppProvider, compact_json_grammar, default_gguf_path
    from metamorph.studies.format_robustness.plan import plan_generations
    from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, render
    from metamorph.studies.format_robustness.sources import construct_dataset
    from pipelines.definitions import build_definitions

    spec = load_registry(reg)[0]
    xs = construct_dataset(args.n, seed=0)
    docs = [render(x, f) for x in xs for f in DEFAULT_FORMATS]
    planned = plan_generations(xs, docs, spec, k=args.k)

    # 1. bare loop: the engine's own call with the provider's settings, nothing of ours around it
    provider = LlamaCppProvider(default_gguf_path(), engine=args.engine)
    engine = provider._backend.load()
    bodies = [
        {k: v for k, v in p.request.params.items() if k != "engine"}
        | {"messages": [dict(m) for m in p.request.messages]}
        for p in planned
    ]
    t0 = time.perf_counter()
    for body in bodies:
        if args.engine == "xllamacpp":  # the provider sends response_format as its compact grammar
            fmt = body.pop("response_format", None)
            grammar = {"grammar": compact_json_grammar(fmt)} if fmt else {}
            engine.handle_chat_completions({**body, **grammar, "cache_prompt": False})
        else:
            engine.reset()
            engine.create_chat_completion(**body)
    bare = time.perf_counter() - t0
    provider.close()

    # 2./3. the asset, cold then warm (inputs materialized first, not timed)
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", [spec.id])
        defs.resolve_job_def("format_robustness_inputs_job").execute_in_process(
            instance=instance,
            run_config={
                "ops": {"format_robustness__source_instances": {"config": {"sources": [f"construct?n={args.n}"]}}}
            },
        )
        gen_job = dg.define_asset_job(
            "bench", selection=dg.AssetSelection.assets(["format_robustness", "workflow_generations"])
        )
        job = dg.Definitions.merge(defs, dg.Definitions(jobs=[gen_job])).resolve_job_def("bench")
        cfg = {"ops": {"format_robustness__workflow_generations": {"config": {"k": args.k}}}}
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            job.execute_in_process(instance=instance, partition_key=spec.id, run_config=cfg)
            times.append(time.perf_counter() - t0)
    cold, warm = times
    print(f"requests: {len(planned)} ({args.n} instances x {len(DEFAULT_FORMATS)} formats x k={args.k})")
    print(f"bare {args.engine} loop : {bare:8.2f} s")
    print(f"asset, cold cache   : {cold:8.2f} s   ratio cold/bare = {cold / bare:.3f}  (target <= 1.05)")
    print(f"asset, warm cache   : {warm:8.2f} s   ratio warm/cold = {warm / cold:.3f}  (target <= 0.05)")


if __name__ == "__main__":
    main()
