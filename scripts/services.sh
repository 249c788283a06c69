#!/usr/bin/env bash
# PostgreSQL and Redis for the scale-out setup and its tests, on loopback ports of our own.
#
#   scripts/services.sh start [postgresql|redis]  # install (apt-get, when missing and root) and start what is
#                                                 # not running (both, or the one named)
#   scripts/services.sh stop [postgresql|redis]   # stop only what `start` started (a server that was already up
#                                                 # is left alone); both, or the one named
#   scripts/services.sh start browser             # install Chromium (apt-get, when missing and root): the
#                                                 # browser of the UI walk-through (tests/core/test_ui_browser.py);
#                                                 # `start` with no name installs it too (nothing to run or stop)
#   scripts/services.sh status   # one line per service; exit 0 when both answer
#   scripts/services.sh run CMD  # start, run CMD with METAMORPH_SERVICES=1 (services reachable), stop;
#                                # when they cannot be started CMD runs without METAMORPH_SERVICES; likewise
#                                # METAMORPH_BROWSER=1 when Chromium is installed
#
# PostgreSQL: cluster in $METAMORPH_SERVICES_DIR/pg (default /tmp/metamorph-services), 127.0.0.1:$METAMORPH_PG_PORT
# (default 55432), trust authentication for the local superuser `postgres` on loopback only; URL
# postgresql://postgres@127.0.0.1:55432/postgres. Redis: 127.0.0.1:$METAMORPH_REDIS_PORT (default 56379), no
# persistence; URL redis://127.0.0.1:56379/0. As root the PostgreSQL server runs as the `postgres` system user
# (it refuses to run as root).
set -euo pipefail

DIR="${METAMORPH_SERVICES_DIR:-/tmp/metamorph-services}"
PG_PORT="${METAMORPH_PG_PORT:-55432}"
REDIS_PORT="${METAMORPH_REDIS_PORT:-56379}"
PG_DATA="$DIR/pg"
REDIS_DIR="$DIR/redis"

pg_bin() {
  local b
  b="$(command -v "$1" 2>/dev/null || true)"
  if [ -z "$b" ]; then
    b="$(ls -d /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -1 || true)"
  fi
  echo "$b"
}

as_pg() {  # run a PostgreSQL server command as the cluster's owner
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

pg_up() { [ -n "$(pg_bin pg_isready)" ] && "$(pg_bin pg_isready)" -q -h 127.0.0.1 -p "$PG_PORT" -t 2; }
redis_up() { command -v redis-cli >/dev/null && [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; }

install_missing() {
  local pkgs=()
  [ -n "$(pg_bin initdb)" ] || pkgs+=(postgresql)
  command -v redis-server >/dev/null || pkgs+=(redis-server)
  [ ${#pkgs[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "services: ${pkgs[*]} not installed and not root: install them (apt-get install ${pkgs[*]})" >&2
    return 1
  fi
  echo "services: installing ${pkgs[*]} (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null; } \
    || { echo "services: apt-get install ${pkgs[*]} failed" >&2; return 1; }
  # the Debian packages may start their own servers on the default ports; ours use their own ports
}

browser_bin() { command -v chromium || command -v chromium-browser || true; }

install_browser() {  # Debian's chromium: the UI tests launch it through Playwright's Python package
  [ -n "$(browser_bin)" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "services: chromium not installed and not root: install it (apt-get install chromium)" >&2
    return 1
  fi
  echo "services: installing chromium (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } \
    || { echo "services: apt-get install chromium failed" >&2; return 1; }
  echo "services: chromium installed: $(browser_bin)"
}

start_pg() {
  if pg_up; then echo "services: postgresql already answering on 127.0.0.1:$PG_PORT"; return 0; fi
  mkdir -p "$DIR" && chmod 755 "$DIR" || return 1
  if [ ! -f "$PG_DATA/PG_VERSION" ]; then
    mkdir -p "$PG_DATA" || return 1
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$PG_DATA" || return 1; fi
    as_pg "$(pg_bin initdb)" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null \
      || as_pg "$(pg_bin initdb)" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null \
      || { echo "services: initdb failed in $PG_DATA" >&2; return 1; }
  fi
  as_pg "$(pg_bin pg_ctl)" -D "$PG_DATA" -l "$PG_DATA/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DATA -c fsync=off -c max_connections=200" start >/dev/null \
    || { echo "services: postgresql did not start (log $PG_DATA/server.log)" >&2; return 1; }
  touch "$DIR/pg.started-by-us"
  STARTED_PG=1
  echo "services: postgresql started on 127.0.0.1:$PG_PORT (data $PG_DATA)"
}

start_redis() {
  if redis_up; then echo "services: redis already answering on 127.0.0.1:$REDIS_PORT"; return 0; fi
  mkdir -p "$REDIS_DIR"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --daemonize yes --pidfile "$REDIS_DIR/redis.pid" \
    --dir "$REDIS_DIR" --save "" --appendonly no --logfile "$REDIS_DIR/redis.log" >/dev/null || return 1
  for _ in $(seq 1 100); do redis_up && break; sleep 0.1; done
  redis_up || { echo "services: redis did not answer on 127.0.0.1:$REDIS_PORT (log $REDIS_DIR/redis.log)" >&2; return 1; }
  touch "$DIR/redis.started-by-us"
  STARTED_REDIS=1
  echo "services: redis started on 127.0.0.1:$REDIS_PORT"
}

stop_all() {  # what a `start` (of any invocation) started
  stop_pg
  stop_redis
}

stop_pg() {
  if [ -f "$DIR/pg.started-by-us" ]; then
    as_pg "$(pg_bin pg_ctl)" -D "$PG_DATA" -m fast -w stop >/dev/null || true
    rm -f "$DIR/pg.started-by-us"
    echo "services: postgresql stopped"
  fi
}

stop_redis() {
  if [ -f "$DIR/redis.started-by-us" ]; then
    if [ -f "$REDIS_DIR/redis.pid" ]; then kill "$(cat "$REDIS_DIR/redis.pid")" 2>/dev/null || true; fi
    for _ in $(seq 1 50); do redis_up || break; sleep 0.1; done
    rm -f "$DIR/redis.started-by-us"
    echo "services: redis stopped"
  fi
}

status() {
  local rc=0
  if pg_up; then echo "postgresql: up   postgresql://postgres@127.0.0.1:$PG_PORT/postgres"; else echo "postgresql: down (127.0.0.1:$PG_PORT)"; rc=1; fi
  if redis_up; then echo "redis:      up   redis://127.0.0.1:$REDIS_PORT/0"; else echo "redis:      down (127.0.0.1:$REDIS_PORT)"; rc=1; fi
  if [ -n "$(browser_bin)" ]; then echo "browser:    $(browser_bin)"; else echo "browser:    not installed (scripts/services.sh start browser)"; fi
  return $rc
}

case "${1:-} ${2:-}" in
  "start ") install_missing; start_pg; start_redis; install_browser ;;
  "start browser") install_browser ;;
  "start postgresql") install_missing; start_pg ;;
  "start redis") install_missing; start_redis ;;
  "stop ") stop_all ;;
  "stop postgresql") stop_pg ;;
  "stop redis") stop_redis ;;
  "status "*) status ;;
  "run "*)
    shift
    STARTED_PG=0 STARTED_REDIS=0
    # stop only what this invocation started (services started earlier by `start` keep running)
    trap '[ "$STARTED_PG" = 1 ] && stop_pg; [ "$STARTED_REDIS" = 1 ] && stop_redis; true' EXIT
    browser=()
    if install_browser; then
      browser=(env METAMORPH_BROWSER=1)
    else
      echo "services: Chromium could not be installed; the UI walk-through in a browser will be skipped" >&2
    fi
    if install_missing && start_pg && start_redis; then
      METAMORPH_SERVICES=1 "${browser[@]}" "$@"
    else
      echo "services: PostgreSQL/Redis could not be started; the tests marked 'services' will be skipped" >&2
      "${browser[@]}" "$@"
    fi ;;
  *) echo "usage: $0 start [postgresql|redis|browser] | stop [postgresql|redis] | status | run CMD..." >&2; exit 2 ;;
esac
