#!/usr/bin/env bash
# The test command (README, CI). As root on a fresh Debian machine it
# installs what the tests need, builds everything, and runs:
#   1. go vet and the unit tests (go test ./...; root-only tests run too),
#   2. the integration suite against a real `berth serve` (runc,
#      namespaces, cgroups, overlayfs, btrfs quotas, nftables),
#   3. the E2B SDK compatibility tests: the pinned npm SDKs (from
#      test/compat/package-lock.json) against `berth serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $EUID -ne 0 ]]; then echo "run as root: sudo $0" >&2; exit 1; fi
scripts/deps.sh
export PATH="/usr/local/go/bin:$PATH"
scripts/build.sh
echo "==> go vet"
go vet ./...
echo "==> S3 server for the blob store tests (versitygw on 127.0.0.1:7470)"
scripts/s3-server.sh start
trap 'scripts/s3-server.sh stop' EXIT
eval "$(scripts/s3-server.sh env | sed 's/^/export /')"
echo "==> unit and package tests"
go test -count=1 -timeout 20m ./...
echo "==> integration tests"
BERTH_BIN="$PWD/bin" go test -count=1 -tags integration -timeout 40m -v ./test/integration/
echo "==> integration tests under gVisor (core exec, files, egress)"
BERTH_IT_ISOLATION=gvisor BERTH_BIN="$PWD/bin" go test -count=1 -tags integration -timeout 10m -v \
  -run 'TestCreateByNameThenExec|TestFileRoundTrip100MB|TestSleepAndWakeKeepFiles|TestFilesAPIStaysInside|TestEgress' ./test/integration/
echo "==> E2B SDK compatibility tests"
(cd test/compat && npm ci --no-audit --no-fund)
BERTH_BIN="$PWD/bin" go test -count=1 -tags compat -timeout 20m -v ./test/compat/
