// Package weaken holds the test-only switches that turn single protections
// off, so each security test can run its probe once more as a negative
// control and show that the probe really detects the hole.
//
// Switches come from the BERTH_TEST_WEAKEN environment variable of the
// daemon, a comma list of protection names (see the constants). Without it
// every Off call reports false. A daemon with any switch set logs a loud
// warning at start; no production path sets the variable.
package weaken
