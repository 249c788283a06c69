"""How many requests per second the runner + cache keep in flight against a server that answers at once.

    .venv/bin/python benchmarks/runner_throughput.py [--n 4000] [--concurrency 256,1024] [--repeat 3]
                                                      [--lookup-keys 48000] [--httpx2]

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
3. **runner + cache**: :func:`metamorph.runner.run_requests` with an ``OpenAIProvider`` of
   ``max_concurrency=c`` into a fresh DuckDB :class:`~metamorph.cache.GenerationCache` (every
   completion committed before it returns).

Printed per phase: requests/s and CPU milliseconds per request in this process (all threads;
``time.process_time``), and the stub's count of requests and 200 replies for the phase, which must
equal ``--n`` with no body requested twice (nothing lost, nothing duplicated); then the medians
over the rounds and the ratios runner / bare SDK and runner / stub alone. Last, a warm rerun (every
request a cache hit) and ``get_many`` over ``--lookup-keys`` stored keys (µs per key).

A measurement, not a test: nothing here asserts on time. The machine's load is printed first and
last: on a shared machine the ratios within a round are the comparable numbers.
"""

import argparse
import asyncio
import json
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


def runner(url: str, prompts: list[str], concurrency: int, path: Path):
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
    return reqs, provider, lambda: run_requests(reqs, provider, GenerationCache(path), log=lambda m: None)


def measure(label: str, url: str, pid: int, n: int, fn) -> dict:
    """Run ``fn()``; wall and CPU seconds here and in the stub, and what the stub saw."""
    before = stub_stats(url)
    s0 = stub_cpu(pid)
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
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
        f"  {label:<16}: {wall:6.2f} s {row['rate']:7.1f} requests/s, CPU here {row['cpu_ms']:5.2f} ms/request, "
        f"stub CPU {row['stub_share']:4.0%} of a core; stub saw {got['requests']} requests, {got['answered']} "
        f"answered for {n} planned -> {'exact' if ok else 'MISMATCH'}",
        flush=True,
    )
    return row


def throughput(args: argparse.Namespace, home: Path) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        os.environ.pop(var, None)
    os.environ["NO_PROXY"] = "127.0.0.1"
    proc, url = start_stub()
    try:
        for c in args.concurrency:
            rows: dict[str, list[dict]] = {}
            print(f"concurrency {c}, {args.n} requests per phase, {load_line()}", flush=True)
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
                reqs, provider, run = runner(url, prompts("runner"), c, home / f"cache-{c}-{rnd}.duckdb")
                row = measure("runner + cache", url, proc.pid, args.n, run)
                _, stats = row["out"]
                row["label"] += f" (calls {stats.calls}, errors {stats.errors})"
                rows.setdefault("runner + cache", []).append(row)
            med = {k: statistics.median(r["rate"] for r in v) for k, v in rows.items()}
            cpu = {k: statistics.median(r["cpu_ms"] for r in v) for k, v in rows.items()}
            exact = all(r["ok"] for v in rows.values() for r in v)
            print(f"concurrency {c}: medians of {args.repeat} rounds ({load_line()})")
            for k in rows:
                print(f"  {k:<16}: {med[k]:7.1f} requests/s, CPU here {cpu[k]:5.2f} ms/request")
            print(
                f"  runner / bare async SDK = {med['runner + cache'] / med['bare async SDK']:.1%}, "
                f"runner / stub alone = {med['runner + cache'] / med['stub alone']:.1%}, "
                f"bare SDK / stub alone = {med['bare async SDK'] / med['stub alone']:.1%}; "
                f"every phase: stub requests = answered = planned, no body twice: {exact}",
                flush=True,
            )
        # warm rerun: every request of the last runner round is a cache hit
        t0 = time.perf_counter()
        from metamorph.cache import GenerationCache
        from metamorph.runner import run_requests

        _, stats2 = run_requests(reqs, provider, GenerationCache(home / f"cache-{c}-{rnd}.duckdb"), log=lambda m: None)
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
    ap.add_argument("--lookup-keys", type=int, default=48_000)
    ap.add_argument("--httpx2", action="store_true", help="also the bare SDK on its default httpx2 transport")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="metamorph-bench-"))
    print(load_line(), flush=True)
    throughput(args, home)
    lookups(args, home)
    print(load_line())


if __name__ == "__main__":
    main()
