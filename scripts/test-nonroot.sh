#!/usr/bin/env bash
# The non-root test tier, as scripts/test.sh runs it (as root): it creates
# the user berthdev if it is missing, copies the tree (tracked and untracked,
# not ignored files) with its dependencies vendored into a fresh directory,
# and runs `go test ./...` there as berthdev with a GOPATH and GOCACHE of its
# own. The default build, no tags: the tier a contributor without root runs.
# Every test must pass or skip naming what it needs (root, KVM, a tag).
# BERTH_NONROOT_KEEP=1 keeps the copy (and berthdev's build cache between
# runs lives in its home).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
if [[ $EUID -ne 0 ]]; then echo "run as root (it creates the user berthdev): sudo $0" >&2; exit 1; fi
user=berthdev
id -u "$user" >/dev/null 2>&1 || useradd -m "$user"
home="$(getent passwd "$user" | cut -d: -f6)"
tree="$(mktemp -d /tmp/berth-nonroot.XXXXXX)"
[[ -n "${BERTH_NONROOT_KEEP:-}" ]] || trap 'rm -rf "$tree"' EXIT
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [[ -e "$f" ]] && printf '%s\0' "$f"
done | tar -c --null -T - | tar -x -C "$tree"
# The user cannot read root's module cache: vendor what the build needs.
(cd "$tree" && go mod vendor)
chown -R "$user:" "$tree"
go="$(command -v go)"
# su - gives a clean login environment; pass only what the run needs.
su - "$user" -c "cd '$tree' && env PATH='$(dirname "$go"):/usr/bin:/bin' GOPATH='$home/go' GOCACHE='$home/.cache/go-build' GOFLAGS=-mod=vendor GOTOOLCHAIN=local go test -count=1 -timeout 20m ./..."
