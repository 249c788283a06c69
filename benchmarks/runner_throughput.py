"""Generation throughput through the real runner + cache path, and the cost of a cache lookup.

    .venv/bin/python benchmarks/runner_throughput.py [--n 2000] [--concurrency 32] [--latency-s 0.2]
                                                      [--lookup-keys 48000]

1. The local HTTP stub (``tests/core/stub_http.py``, in its own process on 127.0.0.1, so it does
   not share this process's GIL) answers every chat completion after ``--latency-s``. The real
   OpenAI SDK (``OpenAIProvider``) sends ``--n`` distinct requests through
   :func:`metamorph.runner.run_requests` into a fresh :class:`metamorph.cache.GenerationCache`
   (every completion written to the DuckDB file). Printed: requests/s against the theoretical
   ``concurrency / latency`` (160/s for 32 and 0.2 s; target >= 90%), the requests the stub
   received, and a warm rerun (every request a cache hit). The same run with the cache replaced
   by an in-memory stand-in (:class:`MemoryCache`), and ``concurrency`` bare threads calling
   ``provider.generate`` in a loop (no runner, no cache), show what the SDK and the machine allow:
   real/stand-in is the share the cache leaves, stand-in/bare the share the runner leaves.
2. ``get_many`` over ``--lookup-keys`` stored keys (rows bulk-inserted first, not timed): µs per key.

A measurement, not a test: nothing here asserts on time.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class MemoryCache:
    """The runner's view of a cache, in a dict (no DuckDB): the reference the real cache is compared to."""

    def __init__(self) -> None:
        self.rows: dict = {}

    def get_many(self, keys, stale_before=None):
        return {k: self.rows[k] for k in keys if k in self.rows and self.rows[k].error is None}

    def claim(self, keys, stale_before=None):
        from metamorph.cache import Claim

        return Claim(claimed=list(keys))

    def put(self, request, result) -> None:
        self.rows[request.cache_key()] = result

    def known_versions(self, provider, model):
        return set()

    def release(self) -> None:
        pass


def bare_loop(provider, reqs: list, threads: int) -> float:
    """Seconds for ``threads`` threads to send ``reqs`` with ``provider.generate`` (no retries, no cache)."""
    import threading

    it = iter(reqs)
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                req = next(it, None)
            if req is None:
                return
            provider.generate(req)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - t0


def start_stub(latency_s: float) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.core.stub_http", "--latency-s", str(latency_s)],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc, proc.stdout.readline().strip()


def stop_stub(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate("", timeout=30)
    return json.loads(out.strip().splitlines()[-1])


def throughput(args: argparse.Namespace, home: Path) -> None:
    from metamorph.cache import GenerationCache
    from metamorph.providers.base import GenerationRequest
    from metamorph.providers.openai_provider import OpenAIProvider
    from metamorph.runner import run_requests

    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        os.environ.pop(var, None)
    os.environ["NO_PROXY"] = "127.0.0.1"
    proc, url = start_stub(args.latency_s)
    try:
        provider = OpenAIProvider(
            kind="openai", api_key="sk-bench", base_url=url + "/v1", max_concurrency=args.concurrency, timeout_s=30
        )

        def batch(prefix: str) -> list:
            return [
                GenerationRequest(
                    "openai",
                    "gpt-x",
                    ({"role": "user", "content": f"{prefix} {i}"},),
                    {"temperature": 0.0},
                    base_url=url + "/v1",
                )
                for i in range(args.n)
            ]

        reqs = batch("question")
        # warm the connection pool and the SDK (not timed)
        warm = [
            GenerationRequest("openai", "gpt-x", ({"role": "user", "content": f"warm {i}"},), {}, base_url=url + "/v1")
            for i in range(args.concurrency)
        ]
        run_requests(warm, provider, GenerationCache(home / "warm.duckdb"), log=lambda m: None)
        bare = bare_loop(provider, batch("bare"), args.concurrency)
        t0 = time.perf_counter()
        run_requests(batch("stand-in"), provider, MemoryCache(), log=lambda m: None)
        mem = time.perf_counter() - t0
        cache = GenerationCache(home / "cache.duckdb")
        t0 = time.perf_counter()
        outcomes, stats = run_requests(reqs, provider, cache, log=lambda m: None)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        _, stats2 = run_requests(reqs, provider, GenerationCache(home / "cache.duckdb"), log=lambda m: None)
        warm_s = time.perf_counter() - t0
    finally:
        served = stop_stub(proc)
    ideal = args.concurrency / args.latency_s
    rate = args.n / cold
    print(
        f"requests: {args.n}, concurrency {args.concurrency}, stub latency {args.latency_s:g} s "
        f"-> theoretical {ideal:.0f} requests/s"
    )
    print(
        f"cold run (all calls)   : {cold:7.2f} s  {rate:6.1f} requests/s  = {rate / ideal:.1%} of theoretical "
        f"(target >= 90%); calls {stats.calls}, errors {stats.errors}"
    )
    print(
        f"bare SDK threads       : {bare:7.2f} s  {args.n / bare:6.1f} requests/s  = {args.n / bare / ideal:.1%} "
        f"of theoretical"
    )
    print(
        f"in-memory stand-in     : {mem:7.2f} s  {args.n / mem:6.1f} requests/s  = {args.n / mem / ideal:.1%} "
        f"of theoretical; stand-in / bare = {bare / mem:.1%}, real cache / stand-in = {mem / cold:.1%}"
    )
    print(f"warm rerun (all hits)  : {warm_s:7.2f} s  {args.n / warm_s:8.0f} requests/s; hits {stats2.cache_hits}")
    print(
        f"stub received          : {served['requests'] - args.concurrency - 2 * args.n} requests for {args.n} keys, "
        f"{served['bodies_requested_twice_or_more']} bodies requested more than once"
    )


def lookups(args: argparse.Namespace, home: Path) -> None:
    import duckdb

    from metamorph.cache import GenerationCache

    path = home / "lookup.duckdb"
    cache = GenerationCache(path)
    keys = [f"{i:064x}" for i in range(args.lookup_keys)]
    con = duckdb.connect(str(path))
    con.execute(
        "INSERT INTO generations SELECT k, 'openai', 'gpt-x', '{}', 'answer ' || k, 'stop', 5, 1, 0.2, "
        "'gpt-x', 'gpt-x', NULL, TIMESTAMP '2026-01-01', NULL, 1 FROM (SELECT unnest(?::VARCHAR[]) AS k)",
        [keys],
    )
    con.close()
    t0 = time.perf_counter()
    got = cache.get_many(keys)
    dt = time.perf_counter() - t0
    print(
        f"get_many               : {len(keys)} keys ({len(got)} hits) in {dt:.2f} s = "
        f"{dt / len(keys) * 1e6:.1f} µs per key"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency-s", type=float, default=0.2)
    ap.add_argument("--lookup-keys", type=int, default=48_000)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    home = Path(tempfile.mkdtemp(prefix="metamorph-bench-"))
    throughput(args, home)
    lookups(args, home)


if __name__ == "__main__":
    main()
