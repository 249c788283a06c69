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
# Started in the background by a non-interactive shell (`make ui &` in a script), this script
# inherits SIGINT (and maybe SIGTERM) ignored, and bash cannot trap a signal ignored on entry: run
# it again, same PID, with the default dispositions, so `kill -INT <pid>` stops the UI.
if [ -z "${METAMORPH_UI_SIGNALS_RESET:-}" ]; then
  ignored=$(awk '/^SigIgn:/ {print $2}' "/proc/$$/status" 2>/dev/null || echo 0)
  if (( (16#${ignored:-0} & 16#4002) != 0 )); then  # mask bits 1 and 14: SIGINT (2), SIGTERM (15)
    METAMORPH_UI_SIGNALS_RESET=1 exec env --default-signal=INT,TERM bash "$0" "$@"
  fi
fi
# a relative METAMORPH_HOME / DAGSTER_HOME means the caller's directory, not the repository's
[ -n "${METAMORPH_HOME:-}" ] && export METAMORPH_HOME="$(realpath -m "$METAMORPH_HOME")"
[ -n "${DAGSTER_HOME:-}" ] && export DAGSTER_HOME="$(realpath -m "$DAGSTER_HOME")"
cd "$(dirname "$0")/.."

VENV="${METAMORPH_VENV:-.venv}"
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-3000}"
# the instance pipelines.run wrote: $METAMORPH_HOME/dagster_home (default data/dagster_home)
export DAGSTER_HOME="${DAGSTER_HOME:-${METAMORPH_HOME:-$PWD/data}/dagster_home}"
"$VENV/bin/python" -c "from pipelines.run import ensure_dagster_home; ensure_dagster_home()" || exit 1

if [ -x "$VENV/bin/dg" ]; then
  cmd=(env VIRTUAL_ENV="$VENV" "$VENV/bin/dg" dev --use-active-venv -h "$HOST" -p "$PORT")
else
  cmd=("$VENV/bin/dagster" dev -w workspace.yaml -h "$HOST" -p "$PORT")
fi

set -m  # the server gets its own process group
env --default-signal=INT,TERM "${cmd[@]}" &
server=$!
# the figure server: $METAMORPH_HOME/figures at $METAMORPH_FIGURES_URL (default
# http://127.0.0.1:3001), where the assets' figure metadata links its PNGs (resources/figures.py);
# a taken port is one line on stderr, and the UI runs without inline figures
env --default-signal=INT,TERM "$VENV/bin/python" -m resources.figures &
figures=$!
set +m
echo "ui: ${cmd[*]} (pid $server); stop with Ctrl-C or: kill $$"

stop() {
  kill -TERM "$figures" 2>/dev/null
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
  wait "$figures" 2>/dev/null
  exit 0
}
trap stop INT TERM
wait "$server"
status=$?
kill -TERM "$figures" 2>/dev/null
wait "$figures" 2>/dev/null
# the server ended by itself: wait for what it started (its code server exits on its own)
trap - INT TERM
while kill -0 -- "-$server" 2>/dev/null; do sleep 0.5; done
exit "$status"
