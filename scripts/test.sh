#!/usr/bin/env bash
# The test command (README, CI). As root on a fresh Debian machine it
# installs what the tests need, builds everything, and runs:
#   1. lint (scripts/lint.sh: go vet, the pinned staticcheck and the Kubernetes
#      chart check, scripts/deploy-check.sh), the unit
#      tests with the race detector and -tags berthtest (root-only tests run
#      too), and the non-root tier (go test ./... as the user berthdev,
#      scripts/test-nonroot.sh),
#   2. the integration suite against a real `berth serve` (runc,
#      namespaces, cgroups, overlayfs, btrfs quotas, nftables), and its
#      core subset again with gVisor,
#   3. the cluster suite (test/cluster: three nodes in network namespaces
#      on one PostgreSQL and one versitygw; spread, the E2B SDK across
#      nodes, locality, node loss, fencing, partition, S3 down),
#      the E2B SDK compatibility tests: the pinned npm SDKs (from
#      test/compat/package-lock.json) against `berth serve`, and the
#      official MCP TypeScript client (test/mcp) driving `berth mcp`,
#   4. a short run of each fuzz target (30 s each),
#   5. the adversarial suite (test/adversarial: escapes and DoS with
#      negative controls) against its own `berth serve`, its subset
#      with gVisor, and its posture and isolation probes on claimed
#      warm-pool members.
# Everything that starts a daemon uses bin/berth built with the berthtest tag
# (test switches and failpoints); scripts/up.sh builds without it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $EUID -ne 0 ]]; then echo "run as root: sudo $0" >&2; exit 1; fi
scripts/deps.sh
export PATH="/usr/local/go/bin:$PATH"
BERTH_BUILD_TAGS=berthtest scripts/build.sh
echo "==> lint"
scripts/lint.sh
echo "==> S3 server for the blob store tests (versitygw on 127.0.0.1:7470)"
scripts/s3-server.sh start
trap 'scripts/s3-server.sh stop' EXIT
eval "$(scripts/s3-server.sh env | sed 's/^/export /')"
echo "==> unit and package tests (race detector, berthtest build)"
# As root the PostgreSQL store's tests start their own servers (internal/
# pgtest, one per test package); REQUIRED makes a missing server a failure
# here instead of a skip.
BERTH_TEST_PG_REQUIRED=1 go test -race -tags berthtest -count=1 -timeout 30m ./...
echo "==> unit tests as a non-root user (default build)"
scripts/test-nonroot.sh
echo "==> integration tests"
BERTH_BIN="$PWD/bin" go test -count=1 -tags integration -timeout 40m -v ./test/integration/
echo "==> integration tests under gVisor (core exec, files, egress)"
BERTH_IT_ISOLATION=gvisor BERTH_BIN="$PWD/bin" go test -count=1 -tags integration -timeout 10m -v \
  -run 'TestCreateByNameThenExec|TestFileRoundTrip100MB|TestSleepAndWakeKeepFiles|TestFilesAPIStaysInside|TestEgress' ./test/integration/
# The pinned npm E2B SDKs: the cluster suite's TestE2BSDKCrossNode and the
# compatibility tests use them.
(cd test/compat && npm ci --no-audit --no-fund)
echo "==> cluster tests (three nodes in network namespaces, one PostgreSQL, one versitygw)"
# Seeds the nodes' images from the integration suite's data dir
# (/var/tmp/berth-it) by hard links; versitygw is bin/versitygw from above.
BERTH_BIN="$PWD/bin" go test -count=1 -tags cluster -timeout 15m -v ./test/cluster/
echo "==> E2B SDK compatibility tests"
BERTH_BIN="$PWD/bin" go test -count=1 -tags compat -timeout 20m -v ./test/compat/
echo "==> MCP client tests (the official MCP TypeScript client driving berth mcp)"
(cd test/mcp && npm ci --no-audit --no-fund)
BERTH_BIN="$PWD/bin" go test -count=1 -tags mcp -timeout 10m -v ./test/mcp/
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
echo "==> adversarial posture and isolation probes on claimed warm-pool members"
# The daemon keeps a pool (BERTH_ADV_POOL), so these probes run in claimed
# members; the run fails if none of its sandboxes was one.
BERTH_ADV_POOL=3 BERTH_BIN="$PWD/bin" BERTH_ADV_DATA=/var/tmp/berth-it go test -count=1 -tags adversarial -timeout 15m -v \
  -run 'TestPosture|TestKernelPaths|TestBlockedSyscalls|TestRawSockets|TestCgroupEscape|TestDevices|TestSetuid|TestExecAsUserHasNoCaps|TestEgressPrivateRanges|TestSandboxToSandbox|TestControlPlaneUnreachable' ./test/adversarial/
