#!/usr/bin/env bash
# Builds berth, berth-agent (static) and the pinned runc (with seccomp) into
# ./bin. runc's version comes from go.mod (the `tool` directive), so every
# machine runs the same runtime.
#
# BERTH_BUILD_TAGS=berthtest (set by scripts/test.sh, never by up.sh or a
# release) builds berth with its test-only switches (internal/weaken) and
# failpoints (internal/failpoint), and berth-agent with the negative-control
# flags those switches pass it (--no-fd-check, --no-log-cap); without it
# they compile to no-ops and the flags do not exist.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
tags=(-tags "${BERTH_BUILD_TAGS:-}")
version="$(git describe --always --dirty 2>/dev/null || echo dev)"
mkdir -p bin
echo "==> building berth-agent (static)"
CGO_ENABLED=0 go build -trimpath "${tags[@]}" -ldflags "-s -w -X main.Version=${version}" -o bin/berth-agent ./cmd/berth-agent
echo "==> building berth${BERTH_BUILD_TAGS:+ (tags: $BERTH_BUILD_TAGS)}"
go build -trimpath "${tags[@]}" -ldflags "-X github.com/berth-sh/berth/daemon.Version=${version}" -o bin/berth ./cmd/berth
runc_version="$(go list -m -f '{{.Version}}' github.com/opencontainers/runc)"
# (Output is captured, not piped into grep -q or head: under pipefail a
# reader that stops early makes runc die of SIGPIPE and the build fail.)
have="$( [[ -x bin/runc ]] && bin/runc --version 2>/dev/null || true)"
if [[ "$have" != *"runc version ${runc_version#v}"* ]]; then
  echo "==> building runc ${runc_version} with seccomp"
  CGO_ENABLED=1 go build -trimpath -tags seccomp -o bin/runc github.com/opencontainers/runc
fi
have="$(bin/runc --version)"
echo "${have%%$'\n'*}"
