#!/usr/bin/env bash
# Installs the Debian packages berth needs to build and run. Idempotent.
set -euo pipefail
if [[ $EUID -ne 0 ]]; then echo "run as root" >&2; exit 1; fi
pkgs=(debootstrap debian-archive-keyring libseccomp-dev pkg-config gcc xfsprogs iproute2 nftables
      e2fsprogs btrfs-progs zstd chromium python3-pandas python3-matplotlib ca-certificates git busybox-static procps util-linux curl)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "==> apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
export PATH="/usr/local/go/bin:$PATH"
if ! command -v go >/dev/null; then
  echo "Go 1.26 or newer is required (expected at /usr/local/go/bin/go)" >&2; exit 1
fi
modprobe overlay 2>/dev/null || true
modprobe loop 2>/dev/null || true
