#!/usr/bin/env bash
# bench-ab.sh A_DIR B_DIR [ROUNDS] [N]: compare two builds of berth with
# `berth bench`, interleaved: A, B, A, B, ... each round restarting
# `berth serve` from that build's directory (berth, berth-agent and runc
# side by side, as /usr/local/lib/berth holds them) on the same data dir,
# so both see the same images, disk and host. Prints each build's median of
# the per-round p50s for TTI, exec and wake, and B's ratio to A.
#
# Stops the `berth serve` that scripts/up.sh started (by its pid file) and
# restarts it from /usr/local/lib/berth afterwards. Root; run on an idle
# machine.
set -euo pipefail
a=${1:?usage: bench-ab.sh A_DIR B_DIR [ROUNDS] [N]} b=${2:?usage: bench-ab.sh A_DIR B_DIR [ROUNDS] [N]}
rounds=${3:-4} n=${4:-50}
listen=127.0.0.1:7070 data=/var/lib/berth log=/var/log/berth-ab.log
out=$(mktemp -d /tmp/bench-ab.XXXXXX)
pid=

stop() {
  local p=${1:-}
  [[ -n $p ]] || return 0
  kill -TERM "$p" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
  echo "berth serve $p did not stop" >&2; return 1
}
serve() {
  nohup setsid "$1/berth" serve --listen "$listen" --data "$data" >>"$log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do curl -fsS "http://$listen/v1/health" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "berth serve from $1 did not come up; see $log" >&2; exit 1
}
# The server up.sh started comes back afterwards, as up.sh starts it.
restart=
finish() {
  stop "$pid"
  if [[ -n $restart ]]; then
    nohup setsid /usr/local/lib/berth/berth serve --listen "$listen" --data "$data" >>/var/log/berth.log 2>&1 &
    echo $! >/run/berth.pid
  fi
}
trap finish EXIT

if [[ -f /run/berth.pid ]] && kill -0 "$(cat /run/berth.pid)" 2>/dev/null; then
  stop "$(cat /run/berth.pid)"; rm -f /run/berth.pid; restart=1
fi
for r in $(seq "$rounds"); do
  for side in a b; do
    dir=${!side}
    serve "$dir"
    echo "==> round $r: $side ($dir)" >&2
    "$dir/berth" --data "$data" bench --n "$n" --json >"$out/$side-$r.json"
    stop "$pid"; pid=
  done
done

python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def med(side, key):
    v = [json.load(open(f"{out}/{side}-{r}.json"))[key]["p50"] for r in range(1, rounds + 1)]
    return statistics.median(v), v
print(f"{'figure':8} {'A p50 ms':>10} {'B p50 ms':>10} {'B/A':>6}   per-round p50s A | B")
for key in ("tti_ms", "exec_ms", "wake_ms"):
    (ma, va), (mb, vb) = med("a", key), med("b", key)
    print(f"{key:8} {ma:10.2f} {mb:10.2f} {mb/ma:6.3f}   {' '.join(f'{x:.1f}' for x in va)} | {' '.join(f'{x:.1f}' for x in vb)}")
print(f"reports: {out}")
PY
