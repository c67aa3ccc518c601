#!/usr/bin/env bash
# One command from a fresh Debian machine (as root) to a running berth:
# installs packages, builds berth + berth-agent + runc, installs them under
# /usr/local/lib/berth, starts `berth serve` on 127.0.0.1:7070, builds the
# default debian-trixie image if it is missing, and shows a sandbox
# answering `node -v`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $EUID -ne 0 ]]; then echo "run as root: sudo $0" >&2; exit 1; fi
scripts/deps.sh
export PATH="/usr/local/go/bin:$PATH"
BERTH_BUILD_TAGS= scripts/build.sh  # a release build: no test switches or failpoints (see build.sh)

prefix=/usr/local/lib/berth
install -d "$prefix"
for b in berth berth-agent runc; do install -m 0755 "bin/$b" "$prefix/$b.new" && mv -f "$prefix/$b.new" "$prefix/$b"; done
ln -sf "$prefix/berth" /usr/local/bin/berth
data=${BERTH_DATA:-/var/lib/berth}
listen=${BERTH_LISTEN:-127.0.0.1:7070}
log=/var/log/berth.log

if [[ -f /run/berth.pid ]] && kill -0 "$(cat /run/berth.pid)" 2>/dev/null; then
  echo "==> stopping the running berth serve (pid $(cat /run/berth.pid)); sandboxes keep running and are adopted"
  kill "$(cat /run/berth.pid)"; sleep 1
fi
echo "==> starting berth serve on $listen (log: $log)"
# The log is the daemon's stderr: request lines and, when it is not a
# terminal, only the first characters of the API key. Keep it 0600 like the
# key files anyway, including a log an older up.sh created 0644.
(umask 077 && touch "$log")
chmod 0600 "$log"
nohup setsid berth serve --listen "$listen" --data "$data" >>"$log" 2>&1 &
echo $! >/run/berth.pid
for _ in $(seq 1 100); do
  curl -fsS "http://$listen/v1/health" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "http://$listen/v1/health" >/dev/null || { echo "berth serve did not come up; see $log" >&2; tail -20 "$log" >&2; exit 1; }

echo "==> the default image debian-trixie (built with debootstrap if missing or from an older recipe: about 2 minutes, once)"
berth --data "$data" image build-base --if-stale

echo "==> a sandbox answering node -v"
berth --data "$data" sandbox create hello --get >/dev/null
berth --data "$data" exec hello -- node -v

cat <<MSG

berth is running.
  URL:     http://$listen
  API key: $(if [[ -t 1 ]]; then cat "$data/api-key"; else echo "in $data/api-key (not printed: stdout is not a terminal)"; fi)
  (client commands on this host read $data/client.json; elsewhere set BERTH_URL and BERTH_API_KEY)

Try:
  berth sandbox create my-agent --instance standard-1
  berth exec my-agent -- bash -lc 'python3 -c "print(6*7)"'
  echo hi | berth cp - my-agent:/home/user/hi.txt
  berth sandbox ls
  berth bench --n 50
MSG
