#!/usr/bin/env bash
# Installs CRIU 4.1 (Debian trixie's) as a private tree for checkpoint and
# restore of runc sandboxes, and prints `criu check`. Idempotent; root.
#
# Bookworm's criu 3.17 fails on current kernels (its vDSO handling), and
# trixie's criu needs trixie's glibc, which must not replace the host's. So
# the trixie packages are unpacked (dpkg -x, nothing registered with dpkg)
# into PREFIX/root and run through that tree's own dynamic loader:
#   PREFIX/berth-criu  ->  PREFIX/root/.../ld-linux-x86-64.so.2
#                          --library-path PREFIX/root/usr/lib/x86_64-linux-gnu
#                          PREFIX/root/usr/sbin/criu "$@"
# runc finds it as PREFIX/bin/criu on the PATH berth gives runc. The host's
# libc, apt state and PATH are untouched. Called from scripts/deps.sh (so by up.sh and test.sh).
set -euo pipefail
if [[ $EUID -ne 0 ]]; then echo "run as root" >&2; exit 1; fi
prefix=${BERTH_CRIU_PREFIX:-/usr/local/lib/berth/criu}
version=4.1.1-1 # the version tested; a newer trixie build is taken with a warning
# criu, its libraries and their libraries down to glibc (trixie's builds need
# trixie's glibc; every soname is checked against the tree below).
pkgs=(criu libcompel1 libc6 libbsd0 libmd0 libgnutls30t64 libgmp10 libhogweed6t64 libnettle8t64
      libidn2-0 libunistring5 libp11-kit0 libffi8 libtasn1-6 libnet1 libnftables1 libnftnl11
      libmnl0 libjansson4 libxtables12 libnl-3-200 libprotobuf-c1 libuuid1)
wrapper="$prefix/berth-criu"
lib="$prefix/root/usr/lib/x86_64-linux-gnu"

if [[ ! -x "$wrapper" || ! -s "$prefix/VERSION" ]]; then
  if ! grep -rqs "trixie" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "scripts/criu.sh: the trixie apt source is missing (scripts/deps.sh adds it)" >&2; exit 1
  fi
  echo "==> criu $version (trixie) into $prefix"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  chmod 0755 "$work"  # apt's _apt user writes the downloads
  (cd "$work" && apt-get download -qq -t trixie "${pkgs[@]}" >/dev/null 2>&1) ||
    (cd "$work" && apt-get download -t trixie "${pkgs[@]}")
  got="$(basename "$(ls "$work"/criu_*.deb)")"
  [[ "$got" == "criu_${version}_amd64.deb" ]] ||
    echo "WARNING: scripts/criu.sh: trixie's criu is $got, not the tested $version" >&2
  rm -rf "$prefix.new"
  install -d -m 0755 "$prefix.new/root"
  for d in "$work"/*.deb; do dpkg -x "$d" "$prefix.new/root"; done
  nlib="$prefix.new/root/usr/lib/x86_64-linux-gnu"
  # Every library resolves inside the tree (nothing half-picked from the host).
  if "$nlib/ld-linux-x86-64.so.2" --library-path "$nlib" --list "$prefix.new/root/usr/sbin/criu" |
      grep -v -e "$prefix.new/root" -e linux-vdso; then
    echo "scripts/criu.sh: criu needs libraries outside its tree (above); add their packages" >&2; exit 1
  fi
  cat >"$prefix.new/berth-criu" <<EOF
#!/bin/sh
# berth's CRIU: trixie's criu with trixie's glibc from a private tree
# (scripts/criu.sh). Arguments are criu's.
exec $lib/ld-linux-x86-64.so.2 --library-path $lib $prefix/root/usr/sbin/criu "\$@"
EOF
  chmod 0755 "$prefix.new/berth-criu"
  echo "$got" >"$prefix.new/VERSION"
  rm -rf "$prefix.old"
  [[ -e "$prefix" ]] && mv "$prefix" "$prefix.old"
  mv "$prefix.new" "$prefix"
  rm -rf "$prefix.old"
fi
# runc 1.5 has no --criu flag and runs the `criu` it finds on PATH: berth
# puts PREFIX/bin first on runc's PATH (runtime.DefaultCRIUDir).
install -d -m 0755 "$prefix/bin"
ln -sfn ../berth-criu "$prefix/bin/criu"
echo "==> criu check ($("$wrapper" --version | head -1))"
# A failed check is reported, not fatal: berth then refuses checkpoints
# (failed_precondition) and sleeps by freeze or stop.
if out="$("$wrapper" check 2>&1)"; then
  grep -v "kdat cache" <<<"$out"
else
  echo "$out" >&2
  echo "WARNING: criu check failed: checkpoint sleep is unavailable on this host" >&2
fi
