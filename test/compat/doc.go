// Package compat runs the official E2B SDKs (npm e2b and
// @e2b/code-interpreter, pinned in package-lock.json) against a real
// `berth serve`, configured only by E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY. The tests are node:test scripts in js/; the Go test (build tag
// compat, root) starts the daemon like test/integration and runs each script.
// The *.freeze.mjs scripts (pause keeping memory) run twice: against a daemon
// with --sleep-mode freeze (TestE2BSDKFreeze, EXPECT_MEMORY=1) and, as their
// negative control, against the default stop mode (TestE2BSDK, EXPECT_MEMORY=0).
//
//	(cd test/compat && npm ci)
//	BERTH_IT_ID=<digit> BERTH_BIN=$PWD/bin go test -count=1 -tags compat -v ./test/compat/
package compat
