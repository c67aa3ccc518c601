//go:build !berthtest

package main

// testFlags: a build without the berthtest tag has no negative-control
// flags; --no-fd-check and --no-log-cap are unknown flags there, and the
// checks they would skip always run.
func testFlags() (noFDCheck, noLogCap *bool) {
	off := false
	return &off, &off
}
