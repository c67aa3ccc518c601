// Package weaken holds the test-only switches that turn single protections
// off, so each security test can run its probe once more as a negative
// control and show that the probe really detects the hole.
//
// The switches exist only in a build with the berthtest tag (the test
// scripts set it; scripts/up.sh and release builds do not). Without the tag
// Off is the constant false and Active is empty, so the compiler drops every
// weakened branch and the binary holds no switch code; the names below still
// compile so call sites and tests need no tags of their own.
//
// In a berthtest build the switches come from the BERTH_TEST_WEAKEN
// environment variable of the daemon, a comma list of protection names (see
// the constants). Without it every Off call reports false. A daemon with any
// switch set logs a loud warning at start.
package weaken
