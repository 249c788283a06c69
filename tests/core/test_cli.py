"""The ``metamorph`` console script: every command's --help is plain terminal text."""

from __future__ import annotations

import re

import pytest

from metamorph.cli import _parser, commands, main, plain

MARKUP = re.compile(r"``|\*\*|:[a-z]+:`")


def test_plain_drops_rest_markup():
    assert (
        plain("Reads ``sql/<study>``, **read-only**; see :func:`~metamorph.trace.run` and :mod:`x.y`.")
        == "Reads sql/<study>, read-only; see metamorph.trace.run and x.y."
    )
    assert plain(None) is None


@pytest.mark.parametrize("name", sorted(commands()))
def test_help_of_every_command_has_no_markup(name, capsys):
    assert main([name, "--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: metamorph {name}") and not MARKUP.search(text), text


def test_the_commands_are_gate_partitions_plan_run_trace_and_verdict():
    assert sorted(commands()) == ["gate", "partitions", "plan", "run", "trace", "verdict"]
    assert not MARKUP.search(_parser().format_help())


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["verdict", "--model", "m", "--study", "förmat"],
            "metamorph verdict: error: argument --study: invalid choice: 'förmat' (choose from 'format_robustness', "
            "'order_probe', 'workflow_perturb', 'wrapper_sensitivity')  (see: metamorph verdict --help)",
        ),
        (
            ["verdict"],
            "metamorph verdict: error: the following arguments are required: --model  (see: metamorph verdict --help)",
        ),
        (
            ["plan", "order_probe", "--no-routing"],  # format routing is the format study's
            "metamorph: error: unrecognized arguments: --no-routing  (see: metamorph --help)",
        ),
        (
            ["launch"],
            "metamorph: error: argument command: invalid choice: 'launch' (choose from 'gate', "
            "'partitions', 'plan', 'run', 'trace', 'verdict')  (see: metamorph --help)",
        ),
    ],
    ids=["bad-choice", "missing-required", "unknown-option", "unknown-command"],
)
def test_a_usage_error_is_one_line_exit_2(argv, line, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err == line + "\n"


def test_output_piped_into_a_reader_that_stops_early_ends_quietly(tmp_path):
    """``metamorph … | head``: the reader closes the pipe before the command writes (here ``true``,
    which reads nothing and exits while Python starts); the command stops with exit 141
    (128 + SIGPIPE) and nothing on stderr — it ended in a BrokenPipeError traceback."""
    import subprocess
    import sys

    script = (
        "import sys; from metamorph.cli import main; "
        "sys.exit(main(['plan', 'order_probe', '--models', 'smollm2', '--cache', sys.argv[1]]))"
    )
    proc = subprocess.run(
        [
            "bash",
            "-c",
            f'"{sys.executable}" -c "{script}" "$1" | true; echo "${{PIPESTATUS[0]}}"',
            "_",
            str(tmp_path / "absent.duckdb"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stderr == "" and proc.stdout.strip() == "141", (proc.stdout, proc.stderr)


def test_an_abbreviated_option_is_not_taken_for_the_whole_one(capsys):
    from metamorph.cli import main

    assert main(["plan", "wrapper_sensitivity", "--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --seed 1" in err and len(err.strip().splitlines()) == 1


def test_ctrl_c_while_the_commands_load_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C before a command starts (the study modules take seconds to import) was a traceback
    through the imports; it is one line and 130, and nothing is written. The registry holds one API
    entry at a closed port, so nothing is computed even if the signal came late."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n  - id: stub-api\n    provider: openai_compatible\n    base_url: http://127.0.0.1:9/v1\n"
        "    model: stub\n    api_key_env: STUB_KEY\n",
        encoding="utf-8",
    )
    env = {**os.environ, "METAMORPH_HOME": str(tmp_path / "home"), "METAMORPH_MODELS": str(registry)}
    env.pop("DAGSTER_HOME", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "metamorph.cli", "plan", "format_robustness", "--limit", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # a shell's background job starts with SIGINT ignored, which the child would inherit
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # interrupt once the commands' imports have begun (numpy is mapped: metamorph.cli itself does not
    # import it) and before they end (about 5 s)
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 60
    while "numpy" not in maps.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out, err) == (130, "", "metamorph: interrupted\n")
    assert not (tmp_path / "home").exists()
