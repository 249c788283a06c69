"""Generation asset vs a bare llama-cpp loop over the identical prompts, and the warm-cache rerun.

    .venv/bin/python benchmarks/generation_overhead.py [--n 4] [--k 1]

Prints three wall times and two ratios (targets: cold/bare <= 1.10, warm/cold <= 0.05). A
measurement, not a test: nothing here asserts on time.
"""

import argparse
import os
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4, help="construct instances (x 4 formats)")
    ap.add_argument("--k", type=int, default=1, help="repeats")
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="metamorph-bench-")
    os.environ["METAMORPH_HOME"] = home
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    import dagster as dg
    from llama_cpp import Llama

    from metamorph.studies.format_robustness.sources import construct_dataset
    from metamorph.studies.format_robustness.plan import plan_generations
    from metamorph.models import load_registry
    from metamorph.providers.llama_cpp import default_gguf_path
    from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, render
    from pipelines.definitions import build_definitions
    from resources.paths import registry_path

    spec = load_registry(registry_path())[0]
    xs = construct_dataset(args.n, seed=0)
    docs = [render(x, f) for x in xs for f in DEFAULT_FORMATS]
    planned = plan_generations(xs, docs, spec, k=args.k)

    # 1. bare loop: the same messages and parameters straight into llama-cpp-python, with the
    # provider's thread settings (one thread for decoding and for prompt processing: the
    # provider's choice for shared machines; llama.cpp's default batch threads = every core)
    from metamorph.providers.llama_cpp import LlamaCppProvider

    threads = LlamaCppProvider(default_gguf_path()).n_threads
    llm = Llama(
        model_path=str(default_gguf_path()),
        n_ctx=4096,
        n_threads=threads,
        n_threads_batch=threads,
        seed=0,
        verbose=False,
    )
    t0 = time.perf_counter()
    for p in planned:
        llm.reset()
        llm.create_chat_completion(messages=[dict(m) for m in p.request.messages], **p.request.params)
    bare = time.perf_counter() - t0
    del llm

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
    print(f"bare llama-cpp loop : {bare:8.2f} s")
    print(f"asset, cold cache   : {cold:8.2f} s   ratio cold/bare = {cold / bare:.3f}  (target <= 1.10)")
    print(f"asset, warm cache   : {warm:8.2f} s   ratio warm/cold = {warm / cold:.3f}  (target <= 0.05)")


if __name__ == "__main__":
    main()
