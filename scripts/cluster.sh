#!/usr/bin/env bash
# Runs a berth cluster of three nodes on this one machine, for trying
# cluster mode (README "Run a cluster"). As root:
#
#   scripts/cluster.sh up      build berth if needed, start one PostgreSQL
#                              (scripts/pg.sh), one versitygw (S3) and three
#                              `berth serve --cluster` nodes n1..n3, and
#                              print how to use them
#   scripts/cluster.sh down    stop the nodes (their sandboxes are destroyed
#                              first), versitygw and PostgreSQL, and remove
#                              their state
#   scripts/cluster.sh status  the nodes as node n1 sees them
#
# Node i listens on 127.0.0.1:71i0 (API; E2B SDKs too), 71i8 (previews) and
# 71i1 (node API, what the other nodes forward to), keeps its data in
# /var/tmp/berth-cluster/n<i> and its sandboxes on bridge berthcl<i>,
# subnet 10.7<i>.0.0/16. All three share one API key and one cluster
# token. On real hosts the flags are the same with real addresses (see the
# README); the node API then wants TLS (--node-tls-cert/--node-tls-key).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $EUID -ne 0 ]]; then echo "run as root: sudo $0 $*" >&2; exit 1; fi
export PATH="/usr/local/go/bin:$PATH"

STATE=/var/tmp/berth-cluster
S3_ADDR=127.0.0.1:7476
S3_ACCESS=berthclusteraccess
S3_SECRET_FILE="$STATE/s3-secret"
NODES=(1 2 3)
BIN="$PWD/bin"

node_pid() { cat "$STATE/n$1/serve.pid" 2>/dev/null || true; }
alive() { local p; p=$(node_pid "$1"); [[ -n "$p" && -r "/proc/$p/exe" && "$(readlink "/proc/$p/exe")" == "$BIN/berth"* ]]; }

start_s3() {
  if [[ -f "$STATE/s3.pid" ]] && kill -0 "$(cat "$STATE/s3.pid")" 2>/dev/null; then return; fi
  scripts/s3-server.sh build  # bin/versitygw, once
  mkdir -p "$STATE/s3/berth"
  [[ -s "$S3_SECRET_FILE" ]] || (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$S3_SECRET_FILE")
  setsid "$BIN/versitygw" --access "$S3_ACCESS" --secret "$(cat "$S3_SECRET_FILE")" --port "$S3_ADDR" --quiet \
    posix "$STATE/s3" >"$STATE/s3.log" 2>&1 </dev/null &
  echo $! >"$STATE/s3.pid"
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/${S3_ADDR%:*}/${S3_ADDR##*:}") 2>/dev/null; then echo "==> versitygw (S3) on http://$S3_ADDR"; return; fi
    sleep 0.1
  done
  echo "versitygw did not start; see $STATE/s3.log" >&2; exit 1
}

start_node() {
  local i=$1 dir="$STATE/n$1"
  if alive "$i"; then echo "==> n$i already running (pid $(node_pid "$i"))"; return; fi
  mkdir -p "$dir"
  # The default image, shared by hard links when this host has one
  # (scripts/up.sh); otherwise n1 builds it and the others fetch it from S3.
  if [[ ! -d "$dir/images" && -d /var/lib/berth/images ]]; then cp -al /var/lib/berth/images "$dir/images"; fi
  BERTH_CLUSTER_DSN="$(scripts/pg.sh dsn)" BERTH_S3_ACCESS_KEY="$S3_ACCESS" BERTH_S3_SECRET_KEY="$(cat "$S3_SECRET_FILE")" \
    setsid "$BIN/berth" serve --data "$dir" --node-name "n$i" \
    --listen "127.0.0.1:71${i}0" --preview-listen "127.0.0.1:71${i}8" --node-listen "127.0.0.1:71${i}1" \
    --api-key-file "$STATE/api-key" --cluster-token-file "$STATE/cluster-token" \
    --run-dir "/run/berth-cluster-n$i" --bridge "berthcl$i" --subnet "10.7$i.0.0/16" \
    --userns-base "$(( (1 << 29) + (i << 25) ))" --egress-proxy-port 3129 \
    --s3-endpoint "http://$S3_ADDR" --s3-bucket berth \
    >>"$dir/serve.log" 2>&1 </dev/null &
  echo $! >"$dir/serve.pid"
  for _ in $(seq 1 300); do
    if curl -fsS -o /dev/null "http://127.0.0.1:71${i}0/v1/health" 2>/dev/null; then echo "==> n$i serving on http://127.0.0.1:71${i}0 (log $dir/serve.log)"; return; fi
    kill -0 "$(node_pid "$i")" 2>/dev/null || { echo "n$i exited; the end of its log:" >&2; tail -n 20 "$dir/serve.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "n$i did not answer in 60 s; see $dir/serve.log" >&2; exit 1
}

cli() { "$BIN/berth" --url http://127.0.0.1:7110 --api-key "$(cat "$STATE/api-key")" "$@"; }

case "${1:-}" in
up)
  [[ -x "$BIN/berth" && -x "$BIN/berth-agent" ]] || scripts/build.sh
  mkdir -p "$STATE"; chmod 700 "$STATE"
  scripts/pg.sh start >/dev/null
  start_s3
  # The key and the token exist before the first node: every node is
  # given the same files.
  [[ -s "$STATE/api-key" ]] || (umask 077; echo "e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$STATE/api-key")
  [[ -s "$STATE/cluster-token" ]] || (umask 077; echo "bct_$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$STATE/cluster-token")
  start_node 1
  cli image build-base --if-stale
  for i in "${NODES[@]:1}"; do start_node "$i"; done
  cat <<EOF

A berth cluster of three nodes is running. Any node answers for any sandbox:
  export BERTH_URL=http://127.0.0.1:7110 BERTH_API_KEY=$(cat "$STATE/api-key")
  $BIN/berth node ls
  for i in 1 2 3 4 5 6; do $BIN/berth sandbox create box\$i --instance lite; done
  $BIN/berth sandbox ls                      # the NODE column: spread over n1..n3
  BERTH_URL=http://127.0.0.1:7130 $BIN/berth exec box1 -- hostname   # through n3, wherever box1 runs
  E2B SDKs: E2B_API_URL=http://127.0.0.1:7120 E2B_SANDBOX_URL=http://127.0.0.1:7120 E2B_API_KEY=\$BERTH_API_KEY
Stop it all: sudo scripts/cluster.sh down
EOF
  ;;
down)
  if [[ -s "$STATE/api-key" ]] && alive 1; then
    for s in $(cli sandbox ls 2>/dev/null | awk 'NR > 1 {print $1}' || true); do cli sandbox rm "$s" >/dev/null 2>&1 || true; done
  fi
  for i in "${NODES[@]}"; do
    if alive "$i"; then
      p=$(node_pid "$i"); kill "$p"
      for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    fi
  done
  if [[ -f "$STATE/s3.pid" ]]; then kill "$(cat "$STATE/s3.pid")" 2>/dev/null || true; fi
  scripts/pg.sh stop >/dev/null 2>&1 || true
  for i in "${NODES[@]}"; do
    ip link del "berthcl$i" 2>/dev/null || true
    nft delete table inet "berthcl$i" 2>/dev/null || true
    nft delete table bridge "berthcl$i" 2>/dev/null || true
  done
  # What a node that was killed left mounted (sandbox layers, netns).
  findmnt -rn -o TARGET | grep -E "^($STATE/|/run/berth-cluster-n)" | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$STATE" /run/berth-cluster-n*
  echo "==> cluster stopped and its state removed"
  ;;
status)
  cli node ls
  ;;
*)
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
