"""Peak memory of ``metamorph plan format_robustness`` against the number of source rows.

    nice -n 10 .venv/bin/python benchmarks/plan_memory.py [--rows 2000,20000] [--medqa PATH]

For each row count a synthetic MedQA file is written in a temporary directory (the rows of
``--medqa``, default the shared sample, repeated with new ids and a numbered question, so that no
two rows share a cache key), then ``metamorph plan format_robustness --source medqa:<file>`` runs
in a child process against a registry of one API model that is never called (its tokens are
estimated as characters / 4, so no tokenizer loads and nothing is generated), with an empty
``METAMORPH_HOME``. Prints per row count: the child's wall and CPU time, its peak RSS
(``ru_maxrss``, imports included) and the RSS per 1,000 rows above the smallest count. Nothing is
kept. A measurement, not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REGISTRY = """models:
  - id: plan-only
    provider: openai_compatible
    base_url: http://127.0.0.1:9/v1
    model: stub
    api_key_env: PLAN_ONLY_KEY
    price_per_mtok: {input: 0.1, output: 0.4}
"""


def write_rows(src: list[dict], n: int, path: Path) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            row = dict(src[i % len(src)])
            row["id"] = f"syn-{i}"
            row["question"] = f"(case {i}) {row['question']}"
            fh.write(json.dumps(row) + "\n")


def measure(rows: Path, registry: Path, home: Path) -> tuple[float, float, float]:
    """``(wall s, cpu s, peak RSS MB)`` of one ``metamorph plan`` child."""
    env = {**os.environ, "METAMORPH_HOME": str(home), "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    cmd = [sys.executable, "-c", "import sys; from metamorph.cli import main; sys.exit(main())"]
    args = ["plan", "format_robustness", "--source", f"medqa:{rows}", "--registry", str(registry)]
    t0 = time.monotonic()
    proc = subprocess.Popen([*cmd, *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"metamorph plan failed on {rows} (exit {os.waitstatus_to_exitcode(status)})")
    return time.monotonic() - t0, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="2000,20000", help="row counts, comma-separated")
    ap.add_argument("--medqa", default=str(REPO.parent / "shared" / "datasets" / "medqa" / "sample.jsonl"))
    a = ap.parse_args()
    src = [json.loads(line) for line in Path(a.medqa).read_text(encoding="utf-8").splitlines() if line.strip()]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; rows from {a.medqa} ({len(src)})")
    first = None
    with tempfile.TemporaryDirectory() as tmp:
        registry = Path(tmp) / "models.yaml"
        registry.write_text(REGISTRY, encoding="utf-8")
        for n in (int(x) for x in a.rows.split(",")):
            rows = Path(tmp) / f"medqa_{n}.jsonl"
            write_rows(src, n, rows)
            wall, cpu, rss = measure(rows, registry, Path(tmp) / "home")
            slope = "" if first is None else f", {(rss - first[1]) / (n - first[0]) * 1000:,.1f} MB per 1,000 rows"
            first = first or (n, rss)
            print(f"{n:>8,} rows: {wall:7.1f} s wall, {cpu:7.1f} s CPU, peak RSS {rss:,.0f} MB{slope}")
            rows.unlink()


if __name__ == "__main__":
    main()
