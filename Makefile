# The two commands of the README. Both install what they need first (scripts/bootstrap.sh).
.PHONY: demo test bootstrap ui

bootstrap:
	@bash scripts/bootstrap.sh

# Runs the document-format study on the embedded default (local SmolLM2 + the construct dataset);
# the registry's other local models (smollm2-135m-instruct-greedy, gemma3-270m) are left out here.
demo: bootstrap
	@OMP_WAIT_POLICY=PASSIVE .venv/bin/python -m pipelines.run format_robustness --models smollm2-135m-instruct

# Runs the whole test suite (includes the real local model end to end). PostgreSQL and Redis for the
# scale-out tests: scripts/services.sh starts them (installing them when missing and root) and stops
# what it started; when they cannot be started the tests marked `services` are skipped (they fail
# instead when METAMORPH_SERVICES=1 is set, as .ci/run does after starting the services itself).
test: bootstrap
	@if [ "$${METAMORPH_SERVICES:-}" = 1 ]; then \
	  OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q; \
	else \
	  bash scripts/services.sh run env OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q; \
	fi

# Opens the Dagster UI on http://127.0.0.1:3000 with the same instance the demo used (dg dev;
# Ctrl-C stops it and everything it started: scripts/ui.sh).
ui: bootstrap
	@bash scripts/ui.sh
