"""Homes and the generation cache file: a full or read-only ``METAMORPH_HOME`` and a damaged cache
are one line and exit 2 before anything is written; ``metamorph plan`` writes nothing and works on
a read-only home. The tmpfs cases mount a real file system (root only; skipped where mount is not
permitted)."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import duckdb
import pytest

from metamorph.cache import GenerationCache
from metamorph.errors import InputError
from metamorph.home import MIN_FREE_BYTES, HomeError, check_home

REPO = Path(__file__).resolve().parents[2]
MEDQA = REPO / "tests" / "bad_inputs" / "format_robustness" / "ok_medqa_crlf.jsonl"
WHAT_TO_DO = "; move it away or delete it and run again (the replies it held are requested again)"


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    """A tmpfs of ``size`` mounted at ``path`` for the block; skips the test where mount is not permitted."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, timeout=30
        )
    except OSError:
        done = None
    if done is None or done.returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def remount_read_only(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, capture_output=True, timeout=30)


def stub_registry(tmp_path: Path) -> Path:
    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n  - id: stub-api\n    provider: openai_compatible\n    base_url: http://127.0.0.1:9/v1\n"
        "    model: stub\n    api_key_env: STUB_KEY\n    price_per_mtok: {input: 0.1, output: 0.4}\n",
        encoding="utf-8",
    )
    return reg


def filled_cache(path: Path, rows: int = 20_000) -> Path:
    """A real generation cache of ``rows`` stored successes (about 1.3 MB on disk)."""
    GenerationCache(path).release()
    con = duckdb.connect(str(path))
    try:
        con.execute(
            "INSERT INTO generations (key, provider, model, request_json, response_text, created_at) "
            "SELECT 'k' || i, 'p', 'm', repeat('x', 500), 'reply', now()::TIMESTAMP FROM range(?) t(i)",
            [rows],
        )
    finally:
        con.close()
    return path


def truncate(path: Path, fraction: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


# --------------------------------------------------------------------------- the cache file


@pytest.mark.parametrize("fraction", [0.5, 0.1])
@pytest.mark.parametrize("read_only", [False, True])
def test_a_truncated_generation_cache_is_one_line_naming_it_and_what_to_do(tmp_path, fraction, read_only):
    """Cut at half, DuckDB opens the file and fails on the first read (a bare IOException in a run,
    a traceback in plan); cut at a tenth, it fails on open. Both: one line, the file, what to do."""
    path = filled_cache(tmp_path / "generation_cache.duckdb")
    truncate(path, fraction)
    with pytest.raises(InputError) as e:
        cache = GenerationCache(path, read_only=read_only)
        cache.get_many([f"k{i}" for i in range(0, 20_000, 7)])
    msg = str(e.value)
    detail = (
        f"the file has {path.stat().st_size:,} bytes, the "  # the header opens: its block list is checked
        if fraction == 0.5
        else "IO Error: Could not read enough bytes from file"  # DuckDB cannot open it
    )
    assert msg.startswith(f"{path}: the generation cache is damaged (truncated or corrupt: {detail}")
    assert msg.endswith(WHAT_TO_DO) and "\n" not in msg


@pytest.mark.parametrize("read_only", [False, True])
def test_a_whole_cache_whose_last_blocks_are_free_opens(tmp_path, read_only):
    """DuckDB lists free blocks in its header and leaves them out of the file when they are at its
    end (a table dropped, then a checkpoint): such a file is whole, and shorter than all the blocks
    it lists. It opens, and every stored reply is read."""
    path = filled_cache(tmp_path / "generation_cache.duckdb", rows=3)
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE scratch AS SELECT repeat('y', 3000) AS b FROM range(3000) t(i)")
        con.execute("CHECKPOINT")
        con.execute("DROP TABLE scratch")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    con = duckdb.connect(str(path), read_only=True)
    try:
        block_size, total, free = con.execute(
            "SELECT block_size, total_blocks, free_blocks FROM pragma_database_size()"
        ).fetchall()[0]
    finally:
        con.close()
    assert free >= 1 and path.stat().st_size < 3 * 4096 + block_size * total  # the shape that was refused
    cache = GenerationCache(path, read_only=read_only)
    assert sorted(cache.get_many(["k0", "k1", "k2"])) == ["k0", "k1", "k2"]
    cache.release()


def test_a_file_that_is_not_duckdb_is_one_line(tmp_path):
    path = tmp_path / "generation_cache.duckdb"
    path.write_bytes(b"not a database " * 200)
    with pytest.raises(InputError) as e:
        GenerationCache(path, read_only=True)
    assert str(e.value) == (
        f'{path}: cannot open the generation cache: IO Error: The file "{path}" exists, but it is not a valid DuckDB '
        "database file! If it is the generation cache, it is damaged: move it away and run again (the replies it "
        "held are requested again)"
    )


def test_a_read_only_cache_writes_nothing_and_refuses_writes(tmp_path):
    path = filled_cache(tmp_path / "generation_cache.duckdb", rows=3)
    before = path.read_bytes()
    cache = GenerationCache(path, read_only=True)
    assert sorted(cache.get_many(["k0", "k2", "nope"])) == ["k0", "k2"]
    with pytest.raises(RuntimeError, match="opened read-only"):
        cache.claim(["k9"])
    cache.release()
    assert path.read_bytes() == before
    with pytest.raises(InputError) as e:
        GenerationCache(tmp_path / "absent.duckdb", read_only=True)
    assert str(e.value) == f"{tmp_path / 'absent.duckdb'}: the generation cache does not exist"
    other = tmp_path / "warehouse.duckdb"
    duckdb.connect(str(other)).close()
    with pytest.raises(InputError) as e:
        GenerationCache(other, read_only=True)
    assert str(e.value) == f"{other}: is a DuckDB file without the table 'generations'; it is not a generation cache"


def test_metamorph_plan_on_a_truncated_cache_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    from metamorph.cli import main

    monkeypatch.setenv("METAMORPH_MODELS", str(stub_registry(tmp_path)))
    path = filled_cache(tmp_path / "generation_cache.duckdb")
    truncate(path, 0.5)
    code = main(["plan", "format_robustness", "--source", f"medqa:{MEDQA}", "--cache", str(path)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith(
        f"error: {path}: the generation cache is damaged (truncated or corrupt: the file has {path.stat().st_size:,} bytes"
    )
    assert line.endswith(WHAT_TO_DO)


# --------------------------------------------------------------------------- the home


def test_check_home_refuses_a_file_and_accepts_a_directory_to_be_created(tmp_path):
    check_home(tmp_path / "not" / "yet")  # created by the run, in a writable directory with room
    assert list(tmp_path.iterdir()) == []  # the check itself leaves nothing behind
    (tmp_path / "f").write_text("x")
    with pytest.raises(HomeError) as e:
        check_home(tmp_path / "f" / "home")
    assert str(e.value) == (
        f"METAMORPH_HOME {tmp_path / 'f' / 'home'}: {tmp_path / 'f'} is not a directory; "
        "set METAMORPH_HOME to a directory"
    )
    assert MIN_FREE_BYTES == 64 * 2**20


def _run(argv: list[str]) -> int:
    from pipelines.run import main

    return main(argv)


def test_a_full_home_is_one_line_exit_2_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    """A 3 MB tmpfs: 1,260 stderr lines and 24 tracebacks around the one useful line before."""
    with tmpfs(tmp_path / "small", "3m") as home:
        monkeypatch.setenv("METAMORPH_HOME", str(home))
        monkeypatch.delenv("DAGSTER_HOME", raising=False)
        code = _run(["format_robustness", "--no-models"])
        err = capsys.readouterr().err
        assert code == 2
        [line] = err.splitlines()
        assert line.startswith(f"error: METAMORPH_HOME {home}: only ") and line.endswith(
            " MiB free on its file system; a run needs at least 64 MiB (warehouse, generation cache, Dagster's "
            "run storage, logs): free some space or set METAMORPH_HOME to a directory on another disk"
        )
        assert list(home.iterdir()) == []


def test_a_read_only_home_refuses_the_run_in_one_line_and_plan_works_on_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("METAMORPH_MODELS", str(stub_registry(tmp_path)))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with tmpfs(tmp_path / "ro", "8m") as home:
        cache = filled_cache(home / "generation_cache.duckdb", rows=3)
        remount_read_only(home)
        monkeypatch.setenv("METAMORPH_HOME", str(home))
        code = _run(["format_robustness", "--no-models"])
        assert (code, capsys.readouterr().err) == (
            2,
            f"error: METAMORPH_HOME {home}: a run cannot write there (the file system is read-only); "
            "set METAMORPH_HOME to a writable directory\n",
        )
        from metamorph.cli import main

        code = main(["plan", "format_robustness", "--source", f"medqa:{MEDQA}"])
        out, err = capsys.readouterr()
        assert (code, err) == (0, "")
        assert out.splitlines()[0] == f"Plan of format_robustness (cache: {cache})"
        assert out.splitlines()[1].startswith("  stub-api workflow_generations: 24 requests, 0 cache hits, 24 calls")


def test_a_run_on_a_truncated_cache_is_one_line_exit_2_before_anything_is_written(tmp_path, capsys, monkeypatch):
    """The run met the cut file in its model step, after the inputs were written, as a bare DuckDB
    error; it is now refused up front (pipelines.run: metamorph.cache.check_cache_file)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("METAMORPH_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("METAMORPH_CACHE_URL", raising=False)
    path = filled_cache(home / "generation_cache.duckdb")
    truncate(path, 0.5)
    assert _run(["format_robustness", "--no-models"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"error: {path}: the generation cache is damaged (truncated or corrupt: the file has {path.stat().st_size:,} bytes"
    )
    assert line.endswith(WHAT_TO_DO)
    assert sorted(p.name for p in home.iterdir()) == ["generation_cache.duckdb"]


def test_an_empty_metamorph_home_or_models_is_the_default_in_every_command(monkeypatch):
    """``METAMORPH_HOME=`` and ``METAMORPH_MODELS=`` (set, empty) are the defaults ``<repo>/data`` and
    ``<repo>/config/models.yaml``, as an empty ``DAGSTER_HOME`` is, in run, plan and trace alike (they
    were the working directory for run and plan: a run wrote its warehouse where trace did not read it)."""
    from metamorph import costplan, trace
    from resources import paths

    monkeypatch.setenv("METAMORPH_HOME", "")
    monkeypatch.setenv("METAMORPH_MODELS", "")
    data = (REPO / "data").resolve()
    assert paths.data_dir() == data
    assert paths.warehouse_path() == str(data / "metamorph.duckdb") == trace.default_warehouse()
    assert paths.cache_path() == str(data / "generation_cache.duckdb") == costplan.default_cache()
    assert paths.registry_path() == str(REPO / "config" / "models.yaml") == costplan.default_registry()
