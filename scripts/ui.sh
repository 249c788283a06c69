#!/usr/bin/env bash
# Opens the Dagster UI on http://$HOST:$PORT (default 127.0.0.1:3000) with the same instance the
# demo used, and stops it with every process it started.
#
# * `dg dev` (dagster-dg-cli, the command Dagster recommends since 1.10; `dagster dev` prints a
#   SupersessionWarning) when the venv has it, else `dagster dev -w workspace.yaml`.
# * The server runs in its own process group (job control on, so SIGINT is not ignored in it, and
#   `env --default-signal` undoes an inherited SIG_IGN). Ctrl-C, or SIGINT/SIGTERM to this
#   script's PID, is passed to the whole group; the script returns once every process of the
#   group (webserver, daemon, code server, gRPC server) is gone, and kills what is left after
#   $UI_STOP_TIMEOUT seconds (default 60).
set -uo pipefail
cd "$(dirname "$0")/.."

VENV="${METAMORPH_VENV:-.venv}"
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-3000}"
export DAGSTER_HOME="${DAGSTER_HOME:-$PWD/data/dagster_home}"
"$VENV/bin/python" -c "from pipelines.run import ensure_dagster_home; ensure_dagster_home()" || exit 1

if [ -x "$VENV/bin/dg" ]; then
  cmd=(env VIRTUAL_ENV="$VENV" "$VENV/bin/dg" dev --use-active-venv -h "$HOST" -p "$PORT")
else
  cmd=("$VENV/bin/dagster" dev -w workspace.yaml -h "$HOST" -p "$PORT")
fi

set -m  # the server gets its own process group
env --default-signal=INT,TERM "${cmd[@]}" &
server=$!
set +m
echo "ui: ${cmd[*]} (pid $server); stop with Ctrl-C or: kill $$"

stop() {
  kill -INT -- "-$server" 2>/dev/null
  local waited=0
  while kill -0 -- "-$server" 2>/dev/null; do
    if [ "$waited" -ge "$(( ${UI_STOP_TIMEOUT:-60} * 2 ))" ]; then
      echo "ui: still running after ${UI_STOP_TIMEOUT:-60}s, killing process group $server" >&2
      kill -KILL -- "-$server" 2>/dev/null
      break
    fi
    sleep 0.5
    waited=$(( waited + 1 ))
  done
  exit 0
}
trap stop INT TERM
wait "$server"
status=$?
# the server ended by itself: wait for what it started (its code server exits on its own)
trap - INT TERM
while kill -0 -- "-$server" 2>/dev/null; do sleep 0.5; done
exit "$status"
