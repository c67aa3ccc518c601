//go:build !berthtest

package failpoint

// Enabled reports whether this build carries failpoints (the berthtest
// build tag). Tests that need one skip without it.
const Enabled = false

// Hit does nothing in a build without the berthtest tag; the empty body is
// inlined away, so the production binary holds no failpoint code.
func Hit(string) {}
