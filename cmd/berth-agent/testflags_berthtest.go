//go:build berthtest

package main

import "flag"

// testFlags registers the negative-control flags of the adversarial suite:
// a daemon with BERTH_TEST_WEAKEN=fd-allowlist passes --no-fd-check, one
// with agent-log-cap --no-log-cap. Only a berthtest build has them.
func testFlags() (noFDCheck, noLogCap *bool) {
	noFDCheck = flag.Bool("no-fd-check", false, "test only: do not check or close inherited descriptors")
	noLogCap = flag.Bool("no-log-cap", false, "test only: do not cap the log file or truncate logged command lines")
	return noFDCheck, noLogCap
}
