"""GraphQL smoke test of the code location as the UI serves it.

    python scripts/graphql_smoke.py [--venv .venv] [--startup-timeout 300] [--keep-home]

Starts the UI the way ``scripts/ui.sh`` does (``dg dev`` when the venv has it, else ``dagster dev
-w workspace.yaml``) on a free port of 127.0.0.1 with a temporary ``DAGSTER_HOME`` and
``METAMORPH_HOME``, in its own process group with SIGINT/SIGTERM at their default action; waits
until GraphQL answers and the code location ``metamorph`` is loaded; asks GraphQL for every asset
group, job, sensor and schedule of the location and compares the names with what
``pipelines.definitions`` defines (its repository: the jobs Dagster adds, such as
``__ASSET_JOB``, included); prints one line per kind and a final JSON line of counts; then stops
the whole process group (SIGINT, SIGKILL for what is left after ``--stop-timeout`` s) and
removes the temporary folders.

Exit status: 0 when every name matches; 1 on a mismatch; 2 when the server did not start, the
location failed to load, or GraphQL answered with an error. Nothing is written outside the
temporary folders.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCATION = "metamorph"

QUERY = """
{ workspaceOrError { __typename
    ... on Workspace { locationEntries { name loadStatus
        locationOrLoadError { __typename
          ... on PythonError { message }
          ... on RepositoryLocation { repositories { name
              assetGroups { groupName }
              jobs { name }
              sensors { name }
              schedules { name } } } } } }
    ... on PythonError { message } } }
"""

KINDS = ("asset_groups", "jobs", "sensors", "schedules")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str, timeout_s: float = 60.0) -> dict | None:
    """The decoded answer of the UI's GraphQL endpoint on ``port``; None while nothing answers."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # an error answer (status 400/500) still has a body
        return json.loads(exc.read())
    except OSError:
        return None


def expected_names() -> dict[str, list[str]]:
    """Sorted names per kind from ``pipelines.definitions`` (the repository the location serves)."""
    sys.path.insert(0, str(REPO))
    from pipelines.definitions import defs

    repo = defs.get_repository_def()
    groups = {node.group_name for node in repo.asset_graph.asset_nodes if node.group_name}
    return {
        "asset_groups": sorted(groups),
        "jobs": sorted(repo.job_names),
        "sensors": sorted(s.name for s in repo.sensor_defs),
        "schedules": sorted(s.name for s in repo.schedule_defs),
    }


def served_names(answer: dict) -> dict[str, list[str]] | str:
    """Sorted names per kind from the GraphQL answer, or the text of what went wrong."""
    if answer.get("errors"):
        return f"GraphQL errors: {answer['errors']}"
    ws = answer["data"]["workspaceOrError"]
    if ws["__typename"] != "Workspace":
        return f"workspace: {ws.get('message')}"
    entries = {e["name"]: e for e in ws["locationEntries"]}
    if LOCATION not in entries:
        return f"no code location {LOCATION!r}; the workspace has {sorted(entries)}"
    loaded = entries[LOCATION]["locationOrLoadError"]
    if loaded is None or loaded["__typename"] != "RepositoryLocation":
        return f"code location {LOCATION!r} did not load: {(loaded or {}).get('message', 'no repository')}"
    repos = loaded["repositories"]
    if len(repos) != 1:
        return f"code location {LOCATION!r} has {len(repos)} repositories, expected 1"
    r = repos[0]
    return {
        "asset_groups": sorted(g["groupName"] for g in r["assetGroups"]),
        "jobs": sorted(j["name"] for j in r["jobs"]),
        "sensors": sorted(s["name"] for s in r["sensors"]),
        "schedules": sorted(s["name"] for s in r["schedules"]),
    }


def _terminal_signals() -> None:
    """In the server's child before exec: SIGINT/SIGTERM unblocked and at their default action
    (an inherited SIG_IGN would make ``dagster dev`` ignore the stop signal)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # a group whose members are all zombies is gone for our purposes
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def descendants(root: int) -> set[int]:
    """Every live process whose parent chain reaches ``root``."""
    parent = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                parent[int(p.name)] = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def stop(server: subprocess.Popen, timeout_s: float) -> tuple[float, bool]:
    """SIGINT to the server's process group; SIGKILL to the group after ``timeout_s``, and to any
    process the server started that left the group and outlived it. Returns (seconds taken,
    whether everything stopped without SIGKILL)."""
    started = descendants(server.pid)
    t0 = time.monotonic()
    try:
        os.killpg(server.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    clean = True
    while group_alive(server.pid) or server.poll() is None:
        if time.monotonic() - t0 > timeout_s:
            clean = False
            try:
                os.killpg(server.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            server.wait(timeout=10)
            break
        time.sleep(0.2)
    left = [pid for pid in started if alive(pid)]
    for pid in left:  # only processes this server started
        clean = False
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return time.monotonic() - t0, clean


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--venv",
        default=os.environ.get("METAMORPH_VENV") or str(Path(sys.executable).parent.parent),
        help="virtualenv with dagster (default: $METAMORPH_VENV, else this Python's)",
    )
    ap.add_argument(
        "--startup-timeout",
        type=float,
        default=300.0,
        help="seconds to wait for the server and the location (a loaded machine with few cores is slow)",
    )
    ap.add_argument("--stop-timeout", type=float, default=30.0, help="seconds before SIGKILL to the group")
    ap.add_argument("--keep-home", action="store_true", help="keep the temporary homes (server logs)")
    args = ap.parse_args(argv)

    venv = Path(args.venv).resolve()
    home = Path(tempfile.mkdtemp(prefix="graphql-smoke-"))
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home / "dagster_home"),
        "METAMORPH_HOME": str(home / "metamorph"),
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "VIRTUAL_ENV": str(venv),
    }
    (home / "metamorph").mkdir()
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from pipelines.instance import ensure_dagster_home; ensure_dagster_home()",
        ],
        cwd=REPO,
        env=env,
        check=True,
    )
    if (venv / "bin" / "dg").exists():
        cmd = [str(venv / "bin" / "dg"), "dev", "--use-active-venv", "-h", "127.0.0.1", "-p", str(port)]
    else:
        cmd = [str(venv / "bin" / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)]
    log = open(home / "server.log", "w")
    t0 = time.monotonic()
    server = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_terminal_signals,
    )
    status, up_s = 2, None
    try:
        expected = expected_names()  # imports the definitions while the server starts
        served: dict | str = "the server did not answer"
        while time.monotonic() - t0 < args.startup_timeout:
            if server.poll() is not None:
                served = f"the server exited with status {server.returncode}"
                break
            answer = graphql(port, QUERY)
            if answer is not None:
                entries = (answer.get("data") or {}).get("workspaceOrError", {}).get("locationEntries") or []
                if any(e["name"] == LOCATION and e["loadStatus"] == "LOADED" for e in entries) or answer.get("errors"):
                    up_s = time.monotonic() - t0
                    served = served_names(answer)
                    break
            time.sleep(1.0)
        else:
            served = f"the location was not loaded within {args.startup_timeout:g} s"
        if isinstance(served, str):
            print(f"graphql_smoke: FAILED: {served}", file=sys.stderr)
        else:
            status = 0
            for kind in KINDS:
                missing = sorted(set(expected[kind]) - set(served[kind]))
                extra = sorted(set(served[kind]) - set(expected[kind]))
                ok = not missing and not extra and len(served[kind]) == len(expected[kind])
                status = status if ok else 1
                line = f"graphql_smoke: {kind}: {len(served[kind])} served, {len(expected[kind])} defined"
                line += " — match" if ok else f" — MISMATCH: not served {missing}, not defined {extra}"
                print(line)
    finally:
        stop_s, clean = stop(server, args.stop_timeout)
        log.close()
        if status == 2:
            print((home / "server.log").read_text()[-3000:], file=sys.stderr)
        if not args.keep_home:
            shutil.rmtree(home, ignore_errors=True)
    if not clean:
        print(
            f"graphql_smoke: the server did not stop within {args.stop_timeout:g} s, or left processes; "
            "they were killed",
            file=sys.stderr,
        )
        status = status or 1
    counts = {kind: len(expected[kind]) for kind in KINDS} if "expected" in locals() else {}
    print(
        json.dumps(
            {
                "status": status,
                **counts,
                "up_s": None if up_s is None else round(up_s, 1),
                "stop_s": round(stop_s, 1),
                "stopped_cleanly": clean,
                "home": str(home),
            }
        )
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
