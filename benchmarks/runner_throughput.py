"""How many requests per second the runner + cache keep in flight against a server that answers at once.

    .venv/bin/python benchmarks/runner_throughput.py [--n 4000] [--concurrency 256,1024] [--repeat 3]
                                                      [--processes N] [--lookup-keys 48000] [--httpx2]

The server is :mod:`tests.core.stub_async` (an ASGI app on uvicorn, in its own process on
127.0.0.1, zero latency), so every second a request spends is the client's. For each concurrency
``c`` and each of ``--repeat`` rounds:

1. **stub alone**: a minimal asyncio client (raw HTTP/1.1 on ``c`` keep-alive connections, no
   parsing beyond ``Content-Length``) sends ``--n`` requests: what the stub can serve; the stub's
   CPU share (its process CPU seconds / wall seconds) says how close it came to its one core.
2. **bare async SDK**: ``openai.AsyncOpenAI`` with ``c`` coroutines each awaiting
   ``chat.completions.create`` in a loop (no runner, no cache, no retries; the HTTP pool sized to
   ``c`` connections), on the SDK's aiohttp transport (``DefaultAioHttpClient``, the reference the
   runner is compared to) and, with ``--httpx2``, on its default httpx2 transport (``bare, httpx2``).
3. **bare SDK × N**: the same in ``--processes`` N processes (default: the usable cores), each
   with ``c / N`` coroutines and ``n / N`` requests; the processes are started and their
   connections opened before the clock starts (the best N event loops of the SDK can do).
4. **runner, 1 process**: :func:`metamorph.runner.run_requests` with an ``OpenAIProvider`` of
   ``max_concurrency=c`` into a fresh DuckDB :class:`~metamorph.cache.GenerationCache` (every
   completion committed before it returns), ``processes=1``: one event loop.
5. **runner, N processes**: the same with ``processes=N`` (what a run of ``PROCESS_MIN_CALLS``
   calls or more gets by default): N client processes, the cache written by this one; the
   processes' start (importing the SDK) is inside the time.

Printed per phase: requests/s and CPU milliseconds per request in the client's processes (this
one, all threads, ``time.process_time``, plus its finished child processes, ``os.times``; for
"bare SDK × N" each process's own CPU from the start signal), and the stub's count of requests
and 200 replies for the phase, which must equal ``--n`` with no body requested twice (nothing
lost, nothing duplicated); then the medians over the rounds and the ratios of the runner to the
bare SDK (in one process and in N) and to the stub alone. Last, a warm rerun (every request a
cache hit) and ``get_many`` over ``--lookup-keys`` stored keys (µs per key).

A measurement, not a test: nothing here asserts on time. The machine's load is printed first and
last: on a shared machine the ratios within a round are the comparable numbers.
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._machine import load_line  # noqa: E402


def start_stub() -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.core.stub_async", "--latency-s", "0"],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc, proc.stdout.readline().strip()


def stub_stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/stats", timeout=30) as r:
        return json.loads(r.read())


def stub_cpu(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


async def blast(url: str, bodies: list[bytes], concurrency: int) -> None:
    """Send ``bodies`` as chat completion POSTs on ``concurrency`` keep-alive connections."""
    host, port = url.removeprefix("http://").split(":")
    it = iter(bodies)

    async def conn() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        for body in it:
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: stub\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        writer.close()

    await asyncio.gather(*(conn() for _ in range(concurrency)))


def async_client(url: str, concurrency: int, transport: str):
    import httpx2
    import openai

    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    http = openai.DefaultAioHttpClient if transport == "aiohttp" else openai.DefaultAsyncHttpxClient
    return openai.AsyncOpenAI(
        api_key="sk-bench", base_url=url + "/v1", max_retries=0, timeout=60, http_client=http(limits=limits)
    )


async def bare_sdk(url: str, prompts: list[str], concurrency: int, transport: str = "aiohttp") -> None:
    client = async_client(url, concurrency, transport)
    it = iter(prompts)

    async def work() -> None:
        for p in it:
            await client.chat.completions.create(
                model="gpt-x", messages=[{"role": "user", "content": p}], temperature=0.0
            )

    async with client:
        await asyncio.gather(*(work() for _ in range(concurrency)))


def _bare_process(url: str, prompts: list[str], concurrency: int, ready, go, out) -> None:
    """One process of "bare SDK × N": open the connections, signal ``ready``, wait for ``go``, send
    the requests; put this process's CPU seconds from ``go`` to the end on ``out``."""
    asyncio.run(bare_sdk(url, [f"warm {p}" for p in prompts[: 2 * concurrency]], concurrency))
    ready.release()
    go.wait()
    c0 = time.process_time()
    asyncio.run(bare_sdk(url, prompts, concurrency))
    out.put(time.process_time() - c0)


def bare_processes(url: str, prompts: list[str], concurrency: int, n: int):
    """Start ``n`` :func:`_bare_process` processes and wait until they are ready; returns the
    function that runs them (and returns their CPU seconds summed)."""
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_bare_process, args=(url, prompts[i::n], concurrency // n, ready, go, out), daemon=True)
        for i in range(n)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()

    def run() -> float:
        go.set()
        cpu = sum(out.get() for _ in procs)
        for p in procs:
            p.join()
        return cpu

    return run


def runner(url: str, prompts: list[str], concurrency: int, path: Path, processes: int = 1):
    from metamorph.cache import GenerationCache
    from metamorph.providers.base import GenerationRequest
    from metamorph.providers.openai_provider import OpenAIProvider
    from metamorph.runner import run_requests

    provider = OpenAIProvider(
        kind="openai", api_key="sk-bench", base_url=url + "/v1", max_concurrency=concurrency, timeout_s=60
    )
    reqs = [
        GenerationRequest(
            "openai", "gpt-x", ({"role": "user", "content": p},), {"temperature": 0.0}, base_url=url + "/v1"
        )
        for p in prompts
    ]
    return (
        reqs,
        provider,
        lambda: run_requests(reqs, provider, GenerationCache(path), log=lambda m: None, processes=processes),
    )


def children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def measure(label: str, url: str, pid: int, n: int, fn, own_cpu: bool = False) -> dict:
    """Run ``fn()``; wall and CPU seconds of the client (this process and its finished children;
    ``own_cpu``: the CPU seconds ``fn`` returns) and of the stub, and what the stub saw."""
    before = stub_stats(url)
    s0 = stub_cpu(pid)
    c0, k0, t0 = time.process_time(), children_cpu(), time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    cpu = out if own_cpu else time.process_time() - c0 + children_cpu() - k0
    stub_s = stub_cpu(pid) - s0
    after = stub_stats(url)
    got = {k: after[k] - before[k] for k in after}
    ok = got["requests"] == n and got["answered"] == n and after["bodies_requested_twice_or_more"] == 0
    row = {
        "label": label,
        "rate": n / wall,
        "cpu_ms": cpu / n * 1e3,
        "stub_share": stub_s / wall,
        "requests": got["requests"],
        "answered": got["answered"],
        "ok": ok,
        "out": out,
    }
    print(
        f"  {label:<20}: {wall:6.2f} s {row['rate']:7.1f} requests/s, CPU {row['cpu_ms']:5.2f} ms/request, "
        f"stub CPU {row['stub_share']:4.0%} of a core; stub saw {got['requests']} requests, {got['answered']} "
        f"answered for {n} planned -> {'exact' if ok else 'MISMATCH'}",
        flush=True,
    )
    return row


def client_start_cpu() -> float:
    """CPU seconds a client process of the runner spends before its first call: a fresh
    interpreter importing what ``python -m metamorph.client_calls`` and the provider import (median of 3)."""
    code = "import metamorph.client_calls, metamorph.providers.openai_provider"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    times = []
    for _ in range(3):
        k0 = children_cpu()
        subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True)
        times.append(children_cpu() - k0)
    return statistics.median(times)


def throughput(args: argparse.Namespace, home: Path) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        os.environ.pop(var, None)
    os.environ["NO_PROXY"] = "127.0.0.1"
    proc, url = start_stub()
    n_proc = args.processes
    try:
        for c in args.concurrency:
            rows: dict[str, list[dict]] = {}
            print(f"concurrency {c}, {args.n} requests per phase, N = {n_proc} processes, {load_line()}", flush=True)
            for rnd in range(args.repeat):
                tag = f"c{c} r{rnd}"

                def prompts(phase: str) -> list[str]:
                    return [f"{phase} {tag} {i}" for i in range(args.n)]

                warm = prompts("warm")[: 2 * c]
                asyncio.run(bare_sdk(url, warm, c))  # opens the connections of this concurrency once
                bodies = [
                    json.dumps({"model": "gpt-x", "messages": [{"role": "user", "content": p}]}).encode()
                    for p in prompts("load")
                ]
                rows.setdefault("stub alone", []).append(
                    measure("stub alone", url, proc.pid, args.n, lambda: asyncio.run(blast(url, bodies, c)))
                )
                for transport, label in (("aiohttp", "bare async SDK"), ("httpx2", "bare, httpx2"))[: 1 + args.httpx2]:
                    bare = prompts(label)
                    rows.setdefault(label, []).append(
                        measure(label, url, proc.pid, args.n, lambda: asyncio.run(bare_sdk(url, bare, c, transport)))
                    )
                bare_n = f"bare SDK × {n_proc}"
                run_bare = bare_processes(url, prompts(bare_n), c, n_proc)
                rows.setdefault(bare_n, []).append(measure(bare_n, url, proc.pid, args.n, run_bare, own_cpu=True))
                for label, k in (("runner, 1 process", 1), (f"runner, {n_proc} processes", n_proc)):
                    path = home / f"cache-{c}-{rnd}-{k}.duckdb"
                    reqs, provider, run = runner(url, prompts(label), c, path, processes=k)
                    rows.setdefault(label, []).append(measure(label, url, proc.pid, args.n, run))
            med = {k: statistics.median(r["rate"] for r in v) for k, v in rows.items()}
            cpu = {k: statistics.median(r["cpu_ms"] for r in v) for k, v in rows.items()}
            exact = all(r["ok"] for v in rows.values() for r in v)
            print(f"concurrency {c}: medians of {args.repeat} rounds ({load_line()})")
            for k in rows:
                print(f"  {k:<20}: {med[k]:7.1f} requests/s, CPU {cpu[k]:5.2f} ms/request")
            one, many = "runner, 1 process", f"runner, {n_proc} processes"
            print(
                f"  requests/s: runner N / bare SDK = {med[many] / med['bare async SDK']:.1%}, "
                f"runner N / bare SDK × N = {med[many] / med[bare_n]:.1%}, "
                f"runner N / runner 1 = {med[many] / med[one]:.1%}, runner N / stub alone = {med[many] / med['stub alone']:.1%}\n"
                f"  CPU per request: bare SDK / runner N = {cpu['bare async SDK'] / cpu[many]:.1%}, "
                f"bare SDK × N / runner N = {cpu[bare_n] / cpu[many]:.1%}, "
                f"runner 1 / runner N = {cpu[one] / cpu[many]:.1%}\n"
                f"  every phase: stub requests = answered = planned, no body twice: {exact}",
                flush=True,
            )
        start = client_start_cpu()
        print(
            f"client process start-up: {start:.2f} s CPU each ({load_line()}); in the N-process runner's CPU per "
            f"request at --n {args.n}: {n_proc} × {start:.2f} s / {args.n} = {n_proc * start / args.n * 1e3:.2f} ms",
            flush=True,
        )
        # warm rerun: every request of the last runner round is a cache hit
        t0 = time.perf_counter()
        from metamorph.cache import GenerationCache
        from metamorph.runner import run_requests

        _, stats2 = run_requests(reqs, provider, GenerationCache(path), log=lambda m: None)
        warm_s = time.perf_counter() - t0
        print(f"warm rerun (all hits)   : {args.n / warm_s:8.0f} requests/s; hits {stats2.cache_hits}")
    finally:
        out, _ = proc.communicate("", timeout=60)
        print(f"stub total: {out.strip().splitlines()[-1]}")


def lookups(args: argparse.Namespace, home: Path) -> None:
    import duckdb

    from metamorph.cache import GenerationCache

    path = home / "lookup.duckdb"
    cache = GenerationCache(path)
    keys = [f"{i:064x}" for i in range(args.lookup_keys)]
    con = duckdb.connect(str(path))
    con.execute(
        "INSERT INTO generations SELECT k, 'openai', 'gpt-x', '{}', 'answer ' || k, 'stop', 5, 1, 0.2, "
        "'gpt-x', 'gpt-x', NULL, TIMESTAMP '2026-01-01', NULL, 1, NULL FROM (SELECT unnest(?::VARCHAR[]) AS k)",
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
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[256, 1024])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--processes", type=int, default=None, help="N (default: the usable cores)")
    ap.add_argument("--lookup-keys", type=int, default=48_000)
    ap.add_argument("--httpx2", action="store_true", help="also the bare SDK on its default httpx2 transport")
    args = ap.parse_args()
    from metamorph.runner import usable_cores

    args.processes = args.processes or max(2, usable_cores())
    home = Path(tempfile.mkdtemp(prefix="metamorph-bench-"))
    print(load_line(), flush=True)
    throughput(args, home)
    lookups(args, home)
    print(load_line())


if __name__ == "__main__":
    main()
