#!/usr/bin/env bash
# Lint: gofmt, go vet and staticcheck (checks chosen in staticcheck.conf), each over
# the default build and over the build with every test tag, so the
# berthtest switches and the suites under test/ are checked too. staticcheck
# is pinned here, the one place its version is named; `go run pkg@version`
# fetches it through the Go module proxy once and caches it. Last, the
# Kubernetes chart's validation (scripts/deploy-check.sh pins its own tools).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2
all_tags=berthtest,integration,adversarial,compat,browser,cluster,mcp
echo "==> gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt: these files need formatting:" >&2
	echo "$unformatted" >&2
	exit 1
fi
echo "==> go vet"
go vet ./...
go vet -tags "$all_tags" ./...
echo "==> staticcheck (${staticcheck#*@})"
go run "$staticcheck" ./...
go run "$staticcheck" -tags "$all_tags" ./...
# The Kubernetes chart: helm template + kubeconform against offline schemas,
# flags checked against berth serve, negative controls (scripts/deploy-check.sh).
echo "==> deploy-check"
scripts/deploy-check.sh
