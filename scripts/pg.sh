#!/usr/bin/env bash
# Runs a throwaway PostgreSQL server (Debian's postgresql package) on
# loopback, for trying `berth serve --cluster` and for the test suites that
# want a shared server. Never a fake: the store's tests must see real
# PostgreSQL (locks, isolation, SQLSTATEs, restarts).
#
#   scripts/pg.sh start   initdb if needed, start the server, create the role and database berth; prints the DSN
#   scripts/pg.sh stop    stop the server started by `start` (pg_ctl, by its pid file) and drop its data
#   scripts/pg.sh dsn     print the DSN (postgres://berth:...@127.0.0.1:7432/berth?sslmode=disable)
#   scripts/pg.sh env     print the BERTH_TEST_PG_DSN= line for the store's tests
#                         (not BERTH_CLUSTER_DSN: exported, it would move every
#                         berth serve started from that shell, test daemons
#                         included, onto this one database)
#
# Typical use:  scripts/pg.sh start && eval "$(scripts/pg.sh env | sed 's/^/export /')"
#               sudo berth serve --cluster "$(scripts/pg.sh dsn)"   (trying it on one machine)
# As root the server runs as the system user postgres (PostgreSQL refuses
# root); as another user it runs as that user. The role berth may create
# databases (the tests make one per test) but is not a superuser.
set -euo pipefail
cd "$(dirname "$0")/.."

ADDR="${BERTH_PG_ADDR:-127.0.0.1:7432}"       # loopback only
HOST="${ADDR%:*}"
PORT="${ADDR##*:}"
STATE="${BERTH_PG_STATE:-/var/tmp/berth-pg}"
DATA="$STATE/data"
SOCK="$STATE/sock"
LOG="$STATE/postgres.log"
PWFILE="$STATE/berth.password"                # the role berth's password (0600)

bindir() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
  if [[ -z "$d" || ! -x "$d/pg_ctl" ]]; then
    echo "PostgreSQL's server is not installed (Debian: scripts/deps.sh installs postgresql)" >&2
    exit 1
  fi
  echo "$d"
}
BIN="$(bindir)"

as_pg() {
  if [[ $EUID -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
# The superuser is named for the OS user the server runs as, so peer
# authentication on the unix socket lets this script in without a password.
SUPER=postgres; [[ $EUID -ne 0 ]] && SUPER="$(id -un)"

running() { [[ -f "$DATA/postmaster.pid" ]] && as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

dsn() {
  [[ -f "$PWFILE" ]] || { echo "no server: run $0 start" >&2; exit 1; }
  echo "postgres://berth:$(cat "$PWFILE")@$ADDR/berth?sslmode=disable"
}

case "${1:-}" in
start)
  if running; then echo "==> PostgreSQL already running on $ADDR" >&2; dsn; exit 0; fi
  mkdir -p "$STATE"
  chmod 0700 "$STATE"
  [[ $EUID -eq 0 ]] && chown postgres: "$STATE"
  if [[ ! -d "$DATA" ]]; then
    as_pg mkdir -p "$SOCK"
    # The superuser gets a random password nobody keeps:
    # setup below goes through the unix socket in the 0700 state dir.
    su_pw="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
    printf '%s\n' "$su_pw" | as_pg tee "$STATE/su.pw" >/dev/null
    as_pg "$BIN/initdb" -D "$DATA" -U "$SUPER" --pwfile "$STATE/su.pw" --auth-host=scram-sha-256 \
      --auth-local=peer -E UTF8 --locale=C >/dev/null
    rm -f "$STATE/su.pw"
  fi
  echo "==> starting PostgreSQL $(basename "$(dirname "$BIN")") on $ADDR (data $DATA, log $LOG)" >&2
  as_pg "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
    -o "-c listen_addresses=$HOST -p $PORT -c unix_socket_directories=$SOCK" start >/dev/null
  if [[ ! -f "$PWFILE" ]]; then
    pw="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
    as_pg "$BIN/psql" -h "$SOCK" -p "$PORT" -U "$SUPER" -d postgres -v ON_ERROR_STOP=1 -q \
      -c "CREATE ROLE berth LOGIN CREATEDB PASSWORD '$pw'" -c "CREATE DATABASE berth OWNER berth" >/dev/null
    (umask 077; printf '%s\n' "$pw" >"$PWFILE")
  fi
  dsn
  ;;
stop)
  if running; then
    as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
    echo "==> PostgreSQL stopped" >&2
  fi
  rm -rf "$STATE"
  ;;
dsn)
  dsn
  ;;
env)
  echo "BERTH_TEST_PG_DSN=$(dsn)"
  ;;
*)
  echo "usage: $0 start|stop|dsn|env" >&2; exit 2
  ;;
esac
