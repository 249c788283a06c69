"""Where a local model's time goes, next to what this machine could do.

    .venv/bin/python benchmarks/local_generation.py [--model smollm2] [--n 2] [--workers N]
        [--engine xllamacpp|llama-cpp-python] [--prefix-reuse]

Prints, in one run (machine load first):

1. the roofline: numpy fp32 sgemm GFLOP/s on one core (single-threaded BLAS) x the cores this
   process may use (``os.sched_getaffinity``);
2. the model's FLOP per token (2 x its parameters, as llama.cpp counts them from the GGUF) and the
   tokens/s the roofline would allow;
3. real format-robustness study calls (construct instances x the default formats, the registry
   entry's parameters) in one context in this process (instrumented; the benchmark loads this one
   model only, so no other model shares the process): prefill and decode tokens/s and each call's
   time split. llama-cpp-python: prefill / decode / grammar-constrained sampling /
   llama-cpp-python (chat template, tokenising, detokenising) / our code, CPU and wall, from
   instrumenting its Python layer. xllamacpp: prefill and decode (constrained sampling included)
   from the server's own timings of each chat request (a prompt's leading segments, evaluated by
   requests of their own before it, count in the rest), the rest (template, tokenising, our code)
   by difference, wall;
4. calls per minute of the same requests through ``run_requests`` with 1 and N worker processes
   (the path every run takes; fresh cache and workers started before timing, each), and whether
   their completions are identical.

Section 3 computes every prompt from nothing (``prefix_reuse: false``). ``--prefix-reuse`` then sends
the requests again with ``prefix_reuse: true`` (either engine keeps the KV state of a prompt's
leading segments for the next prompt that starts with them) and prints how
many completions equal those computed from scratch, and the CPU saved. ``benchmarks/prefix_reuse.py``
measures that in rounds, with medians.

A measurement, not a test: nothing here asserts; the comparable numbers are the ratios within
one run (the machine may be shared).
"""

import os

# one BLAS thread: the roofline is per core (set before numpy is imported)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._machine import load_line  # noqa: E402


def sgemm_gflops(n: int = 1024, reps: int = 7) -> tuple[float, float]:
    """Median (wall, CPU) GFLOP/s of an n x n fp32 matmul (2 n^3 FLOP) over ``reps`` runs."""
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up
    walls, cpus = [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        a @ b
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - t0)
    flop = 2 * n**3
    return flop / statistics.median(walls) / 1e9, flop / statistics.median(cpus) / 1e9


class _Timed:
    """Wraps a bound method, adding its wall and CPU seconds to a bucket chosen per call."""

    def __init__(self, fn, totals: dict, bucket):
        self.fn, self.totals, self.bucket = fn, totals, bucket

    def __call__(self, *args, **kwargs):
        c0, t0 = time.process_time(), time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            name = self.bucket(*args, **kwargs)
            w, c = self.totals.setdefault(name, [0.0, 0.0])
            self.totals[name] = [w + time.perf_counter() - t0, c + time.process_time() - c0]


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of the running processes ``pids`` (Linux ``/proc``; 0 elsewhere)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _with(request, **params):
    """``request`` with ``params`` set (``None`` removes one)."""
    from metamorph.providers.base import GenerationRequest

    merged = {k: v for k, v in {**request.params, **params}.items() if v is not None}
    return GenerationRequest(
        request.provider, request.model, request.messages, merged, renderer_version=request.renderer_version
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2", help="registry id of a llama_cpp entry")
    ap.add_argument("--n", type=int, default=2, help="construct instances (x 4 formats) per measurement")
    ap.add_argument("--workers", type=int, default=0, help="N for the worker comparison (0 = usable cores)")
    ap.add_argument("--engine", default=None, help="xllamacpp or llama-cpp-python (default: the entry's)")
    ap.add_argument("--prefix-reuse", action="store_true", help="also measure prefix reuse against from-scratch")
    args = ap.parse_args()
    os.environ["METAMORPH_HOME"] = tempfile.mkdtemp(prefix="metamorph-bench-")

    from metamorph.cache import GenerationCache
    from metamorph.models import load_registry
    from metamorph.providers.base import GenerationRequest
    from metamorph.providers.engines import DEFAULT_ENGINE, engine_identity, engine_name
    from metamorph.providers.llama_cpp import LlamaCppProvider, gguf_path
    from metamorph.providers.llama_workers import usable_cores
    from metamorph.runner import run_requests
    from metamorph.studies.format_robustness.plan import plan_generations
    from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, render
    from metamorph.studies.format_robustness.sources import construct_dataset
    from resources.paths import registry_path

    print(load_line())
    cores = usable_cores()
    n_workers = args.workers or cores
    per_core, per_core_cpu = sgemm_gflops()
    roof = per_core * cores
    print(
        f"sgemm fp32 (numpy, 1 thread): {per_core:.1f} GFLOP/s per core wall ({per_core_cpu:.1f} per CPU second)"
        f" x {cores} usable cores = {roof:.1f} GFLOP/s roofline"
    )

    spec = {m.id: m for m in load_registry(registry_path())}[args.model]
    engine = args.engine or engine_name(spec.params)
    path = gguf_path(spec.model)
    provider = LlamaCppProvider(path, chat_format=spec.chat_format, engine=engine, in_process=True)
    backend = provider._backend
    if engine == "llama-cpp-python":
        import llama_cpp

        llm = backend.load()
        n_params = llama_cpp.llama_model_n_params(llm.model)
    else:
        n_params = backend.n_params()
    flop_tok = 2 * n_params
    print(
        f"engine {engine_identity(engine)}; model {spec.id} ({path.name}): {n_params / 1e6:.1f} M parameters ->"
        f" {flop_tok / 1e9:.3f} GFLOP per token; roofline {per_core * 1e9 / flop_tok:.0f} tokens/s per core,"
        f" {roof * 1e9 / flop_tok:.0f} on {cores} cores"
    )

    xs = construct_dataset(args.n, seed=0)
    reqs = [p.request for p in plan_generations(xs, [render(x, f) for x in xs for f in DEFAULT_FORMATS], spec, k=1)]
    engine_param = None if engine == DEFAULT_ENGINE else engine
    reqs = [_with(r, engine=engine_param) for r in reqs]

    # 3. one context, instrumented
    totals: dict[str, list[float]] = {}
    timings: list[dict] = []
    if engine == "llama-cpp-python":  # eval of the prompt = prefill, eval of one token = decode
        llm.eval = _Timed(llm.eval, totals, lambda tokens: "prefill" if len(tokens) > 1 else "decode")
        llm.sample = _Timed(llm.sample, totals, lambda *a, **k: "sampling (grammar-constrained)")
        llm.create_chat_completion = _Timed(
            llm.create_chat_completion, totals, lambda *a, **k: "create_chat_completion"
        )
    else:  # the server's own timings of each request
        complete = backend.complete

        def timed_complete(messages, params, lead=None):
            out = complete(messages, params, lead=lead)
            timings.append(out["timings"])
            return out

        backend.complete = timed_complete
    n_prompt = n_completion = 0
    c0, t0 = time.process_time(), time.perf_counter()
    scratch = []
    for r in reqs:
        res = provider.generate(_with(r, prefix_reuse=False))  # every prompt computed whole
        scratch.append(res.text)
        n_prompt += res.prompt_tokens or 0
        n_completion += res.completion_tokens or 0
    total = [time.perf_counter() - t0, time.process_time() - c0]
    print(
        f"{len(reqs)} study calls (format_robustness, construct n={args.n} x {len(DEFAULT_FORMATS)} formats): "
        f"{n_prompt} prompt + {n_completion} completion tokens, {total[0]:.2f} s wall, {total[1]:.2f} s CPU"
    )
    if engine == "llama-cpp-python":
        ccc = totals.pop("create_chat_completion")
        inner = [sum(v[i] for v in totals.values()) for i in (0, 1)]
        totals["llama-cpp-python (template, tokenise, detokenise)"] = [ccc[i] - inner[i] for i in (0, 1)]
        totals["our code (provider.generate around it)"] = [total[i] - ccc[i] for i in (0, 1)]
        pre, dec = totals["prefill"], totals["decode"]
        print(
            f"  prefill {n_prompt / pre[0]:.0f} tokens/s wall ({n_prompt / pre[1]:.0f} per CPU second)"
            f" = {n_prompt * flop_tok / pre[1] / 1e9 / per_core_cpu:.0%} of the sgemm rate per core;"
            f" decode {n_completion / dec[0]:.1f} tokens/s wall ({n_completion / dec[1]:.1f} per CPU second)"
        )
        for name, (w, c) in totals.items():
            print(f"  {name:<52} {w / total[0]:6.1%} of wall  {c / total[1]:6.1%} of CPU")
    else:
        pre_s = sum(t.get("prompt_ms", 0.0) for t in timings) / 1000
        dec_s = sum(t.get("predicted_ms", 0.0) for t in timings) / 1000
        print(
            f"  prefill {n_prompt / pre_s:.0f} tokens/s wall = {n_prompt * flop_tok / pre_s / 1e9 / per_core:.0%} of"
            f" the sgemm rate per core; decode {n_completion / dec_s:.1f} tokens/s wall (constrained sampling"
            " included; one thread, so wall = CPU of the engine)"
        )
        rest = total[0] - pre_s - dec_s
        for name, w in (
            ("prefill", pre_s),
            ("decode (constrained sampling included)", dec_s),
            ("template, tokenise, our code", rest),
        ):
            print(f"  {name:<52} {w / total[0]:6.1%} of wall")

    if args.prefix_reuse:
        c0, t0 = time.process_time(), time.perf_counter()
        reused = [provider.generate(_with(r, prefix_reuse=True)).text for r in reqs]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        same = sum(a == b for a, b in zip(reused, scratch))
        print(
            f"  prefix reuse: {same}/{len(reqs)} completions byte-identical to the from-scratch ones;"
            f" {wall:.2f} s wall, {cpu:.2f} s CPU (from scratch {total[0]:.2f} s, {total[1]:.2f} s CPU)"
        )

    provider.close()

    # 4. calls per minute through the runner, 1 and N workers, each with a fresh cache
    rates, outputs = {}, {}
    for n in sorted({1, n_workers}):
        p = LlamaCppProvider(path, chat_format=spec.chat_format, workers=n, engine=engine)
        # start the workers (model loads) before timing: n one-token calls
        hi = {
            "max_tokens": 1,
            "temperature": 0.0,
            **({"chat_format": spec.chat_format} if spec.chat_format else {}),
            **({"engine": engine_param} if engine_param else {}),
        }
        warm = [
            GenerationRequest("llama_cpp", spec.model, ({"role": "user", "content": "hi"},), hi, repeat_index=i)
            for i in range(1, n + 1)
        ]
        run_requests(warm, p, GenerationCache(Path(tempfile.mkdtemp()) / "w.duckdb"), log=lambda _: None)
        pids = p._pool.pids()
        c0, w0, t0 = time.process_time(), _cpu_s(pids), time.perf_counter()
        outs, stats = run_requests(reqs, p, GenerationCache(Path(tempfile.mkdtemp()) / "c.duckdb"), log=lambda _: None)
        wall, cpu, wcpu = time.perf_counter() - t0, time.process_time() - c0, _cpu_s(pids) - w0
        rates[n] = stats.calls / wall * 60
        outputs[n] = [o.result.text for o in outs]
        print(
            f"  run_requests, {n} worker(s): {stats.calls} calls in {wall:.2f} s wall = {rates[n]:.1f} calls/min;"
            f" CPU {cpu + wcpu:.2f} s (this process {cpu:.2f}, workers {wcpu:.2f})"
        )
        p.close()
    if len(rates) > 1:
        print(
            f"  {n_workers} workers / 1 worker: {rates[n_workers] / rates[1]:.2f}x calls per minute; completions "
            f"identical: {'yes' if outputs[1] == outputs[n_workers] else 'NO'}"
        )


if __name__ == "__main__":
    main()
