#!/usr/bin/env bash
# The test command (README, CI). As root on a fresh Debian machine it
# installs what the tests need, builds everything, and runs:
#   1. go vet and the unit tests (go test ./...; root-only tests run too),
#   2. the integration suite against a real `berth serve` (runc,
#      namespaces, cgroups, overlayfs, btrfs quotas, nftables), and its
#      core subset again with gVisor,
#   3. the E2B SDK compatibility tests: the pinned npm SDKs (from
#      test/compat/package-lock.json) against `berth serve`,
#   4. a short run of each fuzz target (30 s each),
#   5. the adversarial suite (test/adversarial: escapes and DoS with
#      negative controls) against its own `berth serve`, and its subset
#      with gVisor.
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
echo "==> fuzz targets (30 s each)"
go test -run='^$' -fuzz='^FuzzUnpack$' -fuzztime=30s -fuzzminimizetime=5s ./image/
go test -run='^$' -fuzz='^FuzzDecodeRequests$' -fuzztime=30s -fuzzminimizetime=5s ./server/
go test -run='^$' -fuzz='^FuzzAgentAnswers$' -fuzztime=30s -fuzzminimizetime=5s ./agentclient/
echo "==> adversarial suite"
# Reuses the integration suite's data dir (and so its base image); the
# adversarial daemon has its own bridge, subnet and run dir.
BERTH_BIN="$PWD/bin" BERTH_ADV_DATA=/var/tmp/berth-it go test -count=1 -tags adversarial -timeout 30m -v ./test/adversarial/
echo "==> adversarial suite under gVisor (the subset whose invariants hold there)"
BERTH_ADV_ISOLATION=gvisor BERTH_BIN="$PWD/bin" BERTH_ADV_DATA=/var/tmp/berth-it go test -count=1 -tags adversarial -timeout 15m -v \
  -run 'TestCwdProcSelfFd|TestFilesAPIPaths|TestEgressPrivateRanges|TestControlPlaneUnreachable|TestPlantedBinariesNeverRunOnHost' ./test/adversarial/
