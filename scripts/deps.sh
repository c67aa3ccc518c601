#!/usr/bin/env bash
# Installs the Debian packages berth needs to build and run. Idempotent.
set -euo pipefail
if [[ $EUID -ne 0 ]]; then echo "run as root" >&2; exit 1; fi
pkgs=(debootstrap debian-archive-keyring libseccomp-dev pkg-config gcc iproute2 nftables
      e2fsprogs btrfs-progs zstd chromium python3-pandas python3-matplotlib python3-ipykernel python3-jupyter-client ca-certificates git busybox-static procps util-linux curl
      postgresql)
# postgresql: the PostgreSQL state store's tests (internal/pgtest) and
# scripts/pg.sh start throwaway servers from its binaries, on ports of their
# own; the package's default cluster (5432) is not used.
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "==> apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian trixie as an extra source, pinned to priority 1 so nothing comes
# from it unless asked for by name (below: nodejs/npm and runsc).
trixie_source() {
  if ! grep -rqs "trixie" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      > /etc/apt/sources.list.d/berth-trixie.sources
    printf 'Package: *\nPin: release n=trixie\nPin-Priority: 1\n' > /etc/apt/preferences.d/berth-trixie
  fi
}
# Node.js >= 20.18.1 and npm for the E2B SDK compatibility tests (test/compat;
# the pinned e2b SDK's engines field). Bookworm ships Node 18, so take trixie's
# nodejs and npm, with trixie pinned low so nothing else comes from it unasked.
node_ok() {
  command -v node >/dev/null && command -v npm >/dev/null && node -e '
    const [a, b, c] = process.versions.node.split(".").map(Number)
    process.exit(a > 20 || (a === 20 && (b > 18 || (b === 18 && c >= 1))) ? 0 : 1)'
}
if ! node_ok; then
  trixie_source
  echo "==> apt-get install -t trixie nodejs npm"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq -t trixie nodejs npm >/dev/null
  node_ok || { echo "nodejs >= 20.18.1 with npm is required for test/compat" >&2; exit 1; }
fi
# gVisor (runsc) for sandboxes created with isolation "gvisor". Debian 12 has
# no runsc; trixie's is a static Go binary with no dependencies.
if ! command -v runsc >/dev/null; then
  trixie_source
  echo "==> apt-get install runsc (trixie)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq runsc/trixie >/dev/null
fi
# CRIU 4.1 from trixie as a private tree for checkpoint sleep (criu.sh).
trixie_source
"$(dirname "$0")/criu.sh"
export PATH="/usr/local/go/bin:$PATH"
if ! command -v go >/dev/null; then
  echo "Go 1.26 or newer is required (expected at /usr/local/go/bin/go)" >&2; exit 1
fi
modprobe overlay 2>/dev/null || true
modprobe loop 2>/dev/null || true
