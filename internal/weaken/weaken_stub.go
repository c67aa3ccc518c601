//go:build !berthtest

package weaken

// Enabled reports whether this build carries the switches (the berthtest
// build tag). Tests that need a switch skip without it.
const Enabled = false

// Off reports false: a build without the berthtest tag has no switches, and
// because the answer is a constant the compiler drops the weakened branch at
// every call site, so the production binary holds none of them.
func Off(string) bool { return false }

// Active lists no switches in a build without the berthtest tag.
func Active() []string { return nil }
