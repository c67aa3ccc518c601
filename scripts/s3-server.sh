#!/usr/bin/env bash
# Runs a real S3-compatible server (versitygw, posix backend) on loopback
# for the S3 blob-store tests. Never a fake: the tests must see real S3
# semantics (multipart, copy, metadata, error codes).
#
#   scripts/s3-server.sh start   build versitygw if needed, start it, wait until it serves
#   scripts/s3-server.sh stop    stop the server started by `start` (by pid file) and drop its data
#   scripts/s3-server.sh env     print BERTH_TEST_S3_* lines for the tests
#   scripts/s3-server.sh build   only build bin/versitygw (scripts/cluster.sh runs its own server)
#
# Typical use:  scripts/s3-server.sh start && eval "$(scripts/s3-server.sh env | sed 's/^/export /')"
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

VERSITYGW_VERSION=v1.8.0                     # pinned; bump deliberately
ADDR="${BERTH_S3_ADDR:-127.0.0.1:7470}"      # loopback only
STATE=/var/tmp/berth-s3
DATA="$STATE/data"
PIDFILE="$STATE/versitygw.pid"
LOG="$STATE/versitygw.log"
ACCESS_KEY=berthtestaccess
SECRET_KEY=berthtestsecret0123456789
BUCKET=berth-test
BIN="$PWD/bin/versitygw"

running() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid; pid="$(cat "$PIDFILE")"
  # The pid must still be our versitygw, not a recycled pid.
  [[ -n "$pid" && -r "/proc/$pid/exe" && "$(readlink "/proc/$pid/exe")" == "$BIN"* ]]   # "*": still ours if bin/ was rebuilt (" (deleted)")
}

build() {
  # Captured, not piped into grep -q (SIGPIPE under pipefail).
  local mods; mods="$( [[ -x "$BIN" ]] && go version -m "$BIN" 2>/dev/null || true)"
  if [[ "$mods" =~ mod[[:space:]]+github.com/versity/versitygw[[:space:]]+${VERSITYGW_VERSION} ]]; then
    return
  fi
  echo "==> building versitygw ${VERSITYGW_VERSION} (takes a few minutes on a cold module cache)" >&2
  mkdir -p bin
  local start=$SECONDS
  # A throwaway module dir keeps versitygw's dependencies out of berth's go.mod.
  (cd /tmp && GOFLAGS=-buildvcs=false GOBIN="$(dirname "$BIN")" go install "github.com/versity/versitygw/cmd/versitygw@${VERSITYGW_VERSION}")
  echo "==> versitygw built in $((SECONDS - start))s" >&2
}

wait_ready() {
  for _ in $(seq 1 100); do
    # Any HTTP answer (even 403 for an unsigned request) means it serves.
    if curl -s -o /dev/null -m 1 "http://$ADDR/"; then return 0; fi
    running || { echo "versitygw exited; see $LOG" >&2; tail -20 "$LOG" >&2; return 1; }
    sleep 0.1
  done
  echo "versitygw did not answer on $ADDR within 10s; see $LOG" >&2
  return 1
}

case "${1:-}" in
build)
  build
  ;;
start)
  build
  if running; then echo "==> versitygw already running (pid $(cat "$PIDFILE")) on $ADDR" >&2; exit 0; fi
  mkdir -p "$DATA"
  setsid "$BIN" --access "$ACCESS_KEY" --secret "$SECRET_KEY" --port "$ADDR" --quiet \
    posix "$DATA" >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  wait_ready
  echo "==> versitygw ${VERSITYGW_VERSION} serving S3 on http://$ADDR (pid $(cat "$PIDFILE"))" >&2
  ;;
stop)
  if running; then
    pid="$(cat "$PIDFILE")"
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "==> versitygw stopped" >&2
  fi
  rm -f "$PIDFILE"
  rm -rf "$DATA"
  ;;
env)
  echo "BERTH_TEST_S3_ENDPOINT=http://$ADDR"
  echo "BERTH_TEST_S3_ACCESS_KEY=$ACCESS_KEY"
  echo "BERTH_TEST_S3_SECRET_KEY=$SECRET_KEY"
  echo "BERTH_TEST_S3_BUCKET=$BUCKET"
  ;;
*)
  echo "usage: $0 start|stop|env" >&2; exit 2
  ;;
esac
