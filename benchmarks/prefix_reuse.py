"""CPU per local call with and without prefix reuse, and whether the completions agree.

    nice -n 5 .venv/bin/python benchmarks/prefix_reuse.py [--model smollm2] [--n 2] [--k 1] [--reps 3] \
        [--engine xllamacpp|llama-cpp-python]

One model per process (the benchmark computes in this process, and a process loads one model).
The format-robustness study's construct calls (``--n`` instances x the default formats, the
registry entry's parameters, the engine given: default xllamacpp; ``--k`` repeats of each, one
after the other with their own seeds, as the study asks them), computed three ways in each of
``--reps`` rounds:

* ``one batch``: the whole prompt evaluated as one batch (how the engine computed every prompt
  before its segmented prefill; called on the engine directly);
* ``reuse off``: the leading segments (system prompt, then up to each of the next two paragraph
  breaks, then the rest but the last token) each as a batch of its own, then the last token,
  nothing kept between calls
  (``prefix_reuse: false``);
* ``reuse on``: the same batches, the KV state after each segment kept between calls and used by
  the next prompt that starts with the same segments (``prefix_reuse: true``, the default; states
  cleared before each round, so the round's first call computes them).

Prints the machine's load, each round's process CPU seconds per call (not wall: the machine may be
shared), the medians, their ratios, and how many completions of each way equal those of
``reuse off``. A measurement, not a test: nothing here asserts.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._machine import load_line  # noqa: E402


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
    ap.add_argument("--n", type=int, default=2, help="construct instances (x the default formats)")
    ap.add_argument("--k", type=int, default=1, help="repeats of each prompt (the study's k; each its own seed)")
    ap.add_argument("--reps", type=int, default=3, help="rounds (medians are printed)")
    ap.add_argument("--engine", default="xllamacpp", choices=["xllamacpp", "llama-cpp-python"])
    args = ap.parse_args()
    engine = args.engine
    os.environ["METAMORPH_HOME"] = tempfile.mkdtemp(prefix="metamorph-bench-")

    from metamorph.models import load_registry
    from metamorph.providers.llama_cpp import LlamaCppProvider, _lead, gguf_path
    from metamorph.studies.format_robustness.plan import plan_generations
    from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, render
    from metamorph.studies.format_robustness.sources import construct_dataset
    from resources.paths import registry_path

    print(load_line())
    spec = {m.id: m for m in load_registry(registry_path())}[args.model]
    provider = LlamaCppProvider(gguf_path(spec.model), chat_format=spec.chat_format, engine=engine, in_process=True)
    backend = provider._backend
    xs = construct_dataset(args.n, seed=0)
    reqs = [
        _with(p.request, engine=engine)
        for p in plan_generations(xs, [render(x, f) for x in xs for f in DEFAULT_FORMATS], spec, k=args.k)
    ]
    split = [backend.prefix_segments(provider._messages(list(r.messages)), _lead(r)) for r in reqs]
    n_prompt = [provider.request_prompt_tokens(r) for r in reqs]
    print(
        f"{engine}, {spec.id}: {len(reqs)} format-study calls; prompt tokens {min(n_prompt)}-{max(n_prompt)},"
        f" leading segments end at tokens {sorted({tuple(len(p) for p in s) for s in split if s})},"
        f" {sum(not s for s in split)} not split"
    )

    def one_batch(r):
        return backend.complete(provider._messages(list(r.messages)), dict(r.params), lead=None)["text"]

    def off(r):
        return provider.generate(_with(r, prefix_reuse=False)).text

    def on(r):
        return provider.generate(_with(r, prefix_reuse=True)).text

    ways = {"one batch": one_batch, "reuse off": off, "reuse on": on}
    actions: dict[str, int] = {}
    if engine == "xllamacpp":  # count the slot actions (restore = segments found, not computed)
        slot = backend._slot

        def counted(action, filename=""):
            actions[action] = actions.get(action, 0) + 1
            return slot(action, filename)

        backend._slot = counted
    cpu: dict[str, list[float]] = {w: [] for w in ways}
    texts: dict[str, list[list[str]]] = {w: [] for w in ways}
    for rep in range(args.reps):
        if engine == "xllamacpp":  # forget the slot files of the previous round
            for name in backend._states.values():
                Path(backend._dir, name).unlink(missing_ok=True)
        backend._states.clear()
        backend._live = None
        for name, fn in ways.items():
            c0 = time.process_time()
            texts[name].append([fn(r) for r in reqs])
            cpu[name].append((time.process_time() - c0) / len(reqs))
            if actions:
                print(f"    {name}: slot actions {dict(sorted(actions.items()))}")
                actions.clear()
        print(f"  round {rep + 1}: " + ", ".join(f"{w} {cpu[w][-1]:.3f} s CPU/call" for w in ways))
    med = {w: statistics.median(v) for w, v in cpu.items()}
    print("  medians: " + ", ".join(f"{w} {med[w]:.3f} s CPU/call" for w in ways))
    print(
        f"  reuse on / reuse off: {med['reuse on'] / med['reuse off']:.3f}x CPU per call;"
        f" reuse off / one batch: {med['reuse off'] / med['one batch']:.3f}x"
    )
    ref = texts["reuse off"][0]
    for w in ways:
        same = sum(a == b for t in texts[w] for a, b in zip(t, ref))
        print(f"  {w}: {same}/{len(ref) * args.reps} completions byte-identical to reuse off's first round")
    print(load_line())
    provider.close()


if __name__ == "__main__":
    main()
