#!/usr/bin/env bash
# make test's two passes over the whole suite (arguments go to both pytest runs):
#   1. every test but the local-model ones, in two pytest-xdist workers; a test file stays on one
#      worker (--dist loadfile), so its module fixtures are built once and its tests keep their order;
#   2. the local-model tests (marker llm) one at a time: a model call already uses every core, and two
#      at once would only slow each other down.
# The slowest tests of each pass are listed at its end (--durations). The exit status is the first
# failing pass's; a pass that selects no test (pytest's 5) counts as passed.
set -uo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
workers="${METAMORPH_TEST_WORKERS:-2}"

.venv/bin/python -m pytest -q -n "$workers" --dist loadfile -m "not llm" --durations=25 "$@"
first=$?
.venv/bin/python -m pytest -q -m llm --durations=10 "$@"
second=$?
for status in "$first" "$second"; do
  if [ "$status" != 0 ] && [ "$status" != 5 ]; then exit "$status"; fi
done
exit 0
