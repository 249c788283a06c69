"""Decode batching on xllamacpp: do completions stay byte-identical when requests share a batch?

    nice -n 5 .venv/bin/python benchmarks/decode_batching.py [--model smollm2] [--n 2] [--parallel 4]

The format-robustness study's construct calls (``--n`` instances x the default formats, the
registry entry's sampling parameters, each with its own seed) computed by llama.cpp's server
(:class:`xllamacpp.Server`, in this process, ``n_threads`` = the cores) three ways:

* ``one slot``: ``n_parallel`` 1, one request at a time (how metamorph's workers compute today:
  a worker process per core, each with one slot);
* ``N slots, one at a time``: ``n_parallel`` N, still one request at a time (the same arithmetic as
  one slot unless the slot count alone changes it);
* ``N slots, N in flight``: ``n_parallel`` N with N requests sent at once, so the server decodes
  their tokens in one batch (continuous batching).

Prompts are evaluated in one batch each (``cache_prompt`` off), so only decoding differs. Prints
the machine's load, wall and process CPU seconds per call of each way, and how many completions
equal those of ``one slot``. A measurement, not a test: nothing here asserts.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._machine import load_line  # noqa: E402


def server(model_path: Path, chat_format: str | None, n_parallel: int, n_threads: int):
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.n_ctx = 2048 * n_parallel  # each slot gets n_ctx / n_parallel
    params.n_parallel = n_parallel
    params.cpuparams.n_threads = n_threads
    params.cpuparams_batch.n_threads = n_threads
    params.cache_prompt = False
    params.cache_ram_mib = 0
    params.swa_full = True
    params.warmup = False
    params.verbosity = -1
    if chat_format is not None:
        params.chat_template = chat_format
        params.use_jinja = False
    return xllamacpp.Server(params)


def run(srv, bodies: list[dict], in_flight: int) -> tuple[list[str], float, float]:
    """Completions of ``bodies`` with ``in_flight`` requests at a time: texts, wall s, CPU s."""
    from metamorph.providers.llama_cpp import _reply

    def one(body):
        return _reply(srv.handle_chat_completions(dict(body)))["choices"][0]["message"].get("content") or ""

    wall, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(in_flight) as pool:
        texts = list(pool.map(one, bodies))
    return texts, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2", help="registry id of a llama_cpp entry")
    ap.add_argument("--n", type=int, default=2, help="construct instances (x the default formats)")
    ap.add_argument("--parallel", type=int, default=4, help="slots (and requests in flight) of the batched ways")
    args = ap.parse_args()
    os.environ["METAMORPH_HOME"] = tempfile.mkdtemp(prefix="metamorph-bench-")

    from metamorph.models import load_registry
    from metamorph.providers.llama_cpp import _PASS_THROUGH, gguf_path
    from metamorph.studies.format_robustness.plan import plan_generations
    from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, render
    from metamorph.studies.format_robustness.sources import construct_dataset
    from resources.paths import registry_path

    print(load_line())
    spec = {m.id: m for m in load_registry(registry_path())}[args.model]
    xs = construct_dataset(args.n, seed=0)
    requests = [p.request for p in plan_generations(xs, [render(x, f) for x in xs for f in DEFAULT_FORMATS], spec, k=1)]
    bodies = [
        {**{k: r.params[k] for k in _PASS_THROUGH if k in r.params}, "messages": list(r.messages), "stream": False}
        for r in requests
    ]
    cores = os.cpu_count() or 1
    print(f"xllamacpp, {spec.id}: {len(bodies)} format-study calls, {cores} threads per server")
    path = gguf_path(spec.model)
    ways = {}
    for name, n_parallel, in_flight in (
        ("one slot", 1, 1),
        (f"{args.parallel} slots, one at a time", args.parallel, 1),
        (f"{args.parallel} slots, {args.parallel} in flight", args.parallel, args.parallel),
    ):
        srv = server(path, spec.chat_format, n_parallel, cores)
        run(srv, bodies[:1], 1)  # load and warm the weights
        ways[name] = run(srv, bodies, in_flight)
        del srv
    base_texts, base_wall, base_cpu = ways["one slot"]
    for name, (texts, wall, cpu) in ways.items():
        same = sum(a == b for a, b in zip(texts, base_texts, strict=True))
        print(
            f"{name:>26}: {wall / len(bodies):.3f} s wall/call ({wall / base_wall:.3f}x one slot), "
            f"{cpu / len(bodies):.3f} s CPU/call ({cpu / base_cpu:.3f}x); "
            f"{same}/{len(bodies)} completions equal one slot's"
        )


if __name__ == "__main__":
    main()
