# The two commands of the README (make demo, make test), the UI and the documentation site. Each
# installs what it needs first (scripts/bootstrap.sh).
.PHONY: demo test test-fast bootstrap ui docs

bootstrap:
	@bash scripts/bootstrap.sh

# Runs the document-format study on the embedded default (local SmolLM2 + the construct dataset);
# the registry's other local models (smollm2-greedy, gemma3-270m) are left out here.
demo: bootstrap
	@OMP_WAIT_POLICY=PASSIVE .venv/bin/python -m pipelines.run format_robustness --models smollm2

# Runs the whole test suite (includes the real local models end to end, with both engines: the
# bootstrap --dev also installs the test, docs and k8s extras and builds llama-cpp-python, the
# fallback engine). PostgreSQL and Redis for the
# scale-out tests: scripts/services.sh starts them (installing them when missing and root) and stops
# what it started; when they cannot be started the tests marked `services` are skipped (they fail
# instead when METAMORPH_SERVICES=1 is set, as .ci/run does after starting the services itself).
# It also installs Chromium (apt-get, as root) for the UI walk-through in a browser, skipped without it
# (failed instead when METAMORPH_BROWSER=1 is set, as by services.sh once Chromium is there, and .ci/run).
# Two passes (scripts/test-all.sh): all but the local-model tests in two pytest-xdist workers, then the
# local-model tests one at a time; each lists its slowest tests at the end, to keep the run within CI's hour.
test:
	@bash scripts/bootstrap.sh --dev
	@if [ "$${METAMORPH_SERVICES:-}" = 1 ]; then \
	  bash scripts/test-all.sh; \
	else \
	  bash scripts/services.sh run bash scripts/test-all.sh; \
	fi

# The inner loop: unit and in-process tests without the local models, the UI process, PostgreSQL /
# Redis, or the tests that start metamorph run or materialize a whole study (marker `slow`,
# tests/conftest.py). A few minutes (docs/benchmarks.md); `make test` stays the whole suite, what CI runs.
test-fast:
	@bash scripts/bootstrap.sh --dev
	@OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q -m "not llm and not ui and not services and not slow"

# Opens the Dagster UI on http://127.0.0.1:3000 with the same instance the demo used (dg dev;
# Ctrl-C stops it and everything it started: scripts/ui.sh).
ui: bootstrap
	@bash scripts/ui.sh

# Builds the documentation site (mkdocs.yml, docs/) into site/ with warnings as errors; the API pages
# come from the library's docstrings (mkdocstrings, static analysis). NO_MKDOCS_2_WARNING silences
# mkdocs-material's end-of-life banner.
docs:
	@bash scripts/bootstrap.sh --dev
	@NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict
