"""N llama.cpp worker processes: the same completions as one worker, on the packaged
models and a study's real prompts, through the runner; a dead worker is replaced; Ctrl-C does not
stop a call in flight; workers exit with their parent."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from metamorph.cache import GenerationCache
from metamorph.models import load_registry
from metamorph.providers.base import GenerationRequest, ProviderError
from metamorph.providers.llama_cpp import LlamaCppProvider, gguf_path
from metamorph.runner import run_requests
from tests.conftest import REPO
from tests.core.test_local_engines import mapped_ggufs

pytestmark = pytest.mark.llm


def study_requests(model_id: str, n: int = 1, formats: tuple[str, ...] = ("json", "md")) -> tuple:
    """The format-robustness study's requests of registry entry ``model_id`` (construct
    instances, k=1): real system prompt, instructions, documents and decoding parameters."""
    from metamorph.studies.format_robustness.plan import plan_generations
    from metamorph.studies.format_robustness.renderers import render
    from metamorph.studies.format_robustness.sources import construct_dataset

    spec = {m.id: m for m in load_registry(REPO / "config" / "models.yaml")}[model_id]
    xs = construct_dataset(n, seed=0)
    return spec, [p.request for p in plan_generations(xs, [render(x, f) for x in xs for f in formats], spec, k=1)]


def texts(results) -> list:
    return [(r.text, r.finish_reason, r.prompt_tokens, r.completion_tokens) for r in results]


@pytest.mark.parametrize("model_id", ["smollm2", "gemma3-270m"])
def test_two_workers_give_the_in_process_completions_byte_for_byte(model_id, tmp_path):
    spec, reqs = study_requests(model_id)
    path = gguf_path(spec.model)
    one = LlamaCppProvider(path, chat_format=spec.chat_format)
    try:
        expected = texts(one.generate(r) for r in reqs)
        version, one_count = one.model_version, one.prompt_tokens(list(reqs[0].messages))
    finally:
        one.close()
    assert len(expected) == 2 and all(t[0] for t in expected)
    pooled = LlamaCppProvider(path, chat_format=spec.chat_format, workers=2)
    try:
        assert pooled.max_concurrency == 4  # two computing, two waiting for the worker holding their prompt
        # through the runner (four threads, one call per worker at a time), then in reverse order
        # with no cache, so each request runs beside another one and on the other worker
        outs, stats = run_requests(reqs, pooled, GenerationCache(tmp_path / "c.duckdb"), log=lambda _: None)
        assert stats.calls == 2 and texts(o.result for o in outs) == expected
        results: dict[int, object] = {}

        def call(i: int) -> None:
            results[i] = pooled.generate(reqs[i])

        threads = [threading.Thread(target=call, args=(i,)) for i in reversed(range(2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert texts(results[i] for i in range(2)) == expected
        assert {r.model_version for r in results.values()} == {version}
        assert pooled.prompt_tokens(list(reqs[0].messages)) == one_count
        assert mapped_ggufs(os.getpid()) == set()  # the parent loads no weights
        assert [mapped_ggufs(pid) for pid in pooled._pool.pids()] == [{str(path)}] * 2
    finally:
        pooled.close()


@pytest.fixture(scope="module")
def smol_pool():
    p = LlamaCppProvider(n_ctx=512, workers=2)
    yield p
    p.close()


def hello(p, content="Say hello.", max_tokens=8) -> GenerationRequest:
    return GenerationRequest(
        "llama_cpp",
        p.model_name,
        ({"role": "user", "content": content},),
        {"temperature": 0.0, "max_tokens": max_tokens, "seed": 0},
    )


def test_a_killed_worker_fails_its_call_and_is_replaced(smol_pool):
    first = smol_pool.generate(hello(smol_pool)).text
    old = smol_pool._pool.pids()
    assert len(old) == 2
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    for _ in old:  # each dead worker fails the one call it is given
        with pytest.raises(ProviderError, match=r"worker process died during the call \(exit code -9\)") as e:
            smol_pool.generate(hello(smol_pool))
        assert not e.value.retryable
    new = smol_pool._pool.pids()
    assert len(new) == 2 and not set(new) & set(old)
    assert smol_pool.generate(hello(smol_pool)).text == first  # the replacements compute the same


def test_ctrl_c_does_not_stop_a_call_in_flight(smol_pool):
    count = hello(smol_pool, "Count from one to twenty.", max_tokens=64)
    expected = smol_pool.generate(count).text
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", smol_pool.generate(count)))
    t.start()
    time.sleep(0.3)
    for pid in smol_pool._pool.pids():  # what Ctrl-C does: SIGINT to every process of the group
        os.kill(pid, signal.SIGINT)
    t.join(60)
    assert out["r"].text == expected
    assert smol_pool.generate(hello(smol_pool)).text  # the workers are still there


def test_workers_exit_when_their_parent_dies():
    code = (
        "import os, sys\n"
        "from metamorph.providers.base import GenerationRequest\n"
        "from metamorph.providers.llama_cpp import LlamaCppProvider\n"
        "p = LlamaCppProvider(n_ctx=256, workers=2)\n"
        "p.generate(GenerationRequest('llama_cpp', p.model_name, ({'role': 'user', 'content': 'hi'},),"
        " {'max_tokens': 1, 'temperature': 0.0}))\n"
        "print(*p._pool.pids(), flush=True)\n"
        "os._exit(0)\n"
    )  # no cleanup: as if the parent were killed
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    pids = [int(x) for x in out.stdout.split()]
    assert len(pids) == 2, out.stderr
    deadline = time.monotonic() + 20
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [pid for pid in pids if _alive(pid)]
    assert alive == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_worker_imports_the_callers_package_not_one_in_the_working_directory(tmp_path):
    """A worker runs ``python -m metamorph.providers.llama_workers``; ``-m`` alone would put the
    working directory first on its path, so a ``metamorph/`` folder there (an older checkout, say)
    would be the worker's package. Here that folder's package exits at import: the count must come
    from the caller's package all the same."""
    decoy = tmp_path / "elsewhere" / "metamorph"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise SystemExit(3)\n")
    script = tmp_path / "count.py"
    script.write_text(
        "from metamorph.providers.llama_cpp import LlamaCppProvider\n"
        "p = LlamaCppProvider(vocab_only=True)\n"
        "print(p.count_tokens('Say hello.'))\n"
        "p.close()\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=decoy.parent,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert (out.returncode, out.stdout) == (0, "3\n"), out.stderr[-2000:]  # Say, " hello", "."
