//go:build !berthtest

package weaken

import "testing"

// The default build ignores the variable: a daemon started with it set still
// runs with every protection on.
func TestDefaultBuildIgnoresTheEnvironment(t *testing.T) {
	t.Setenv(EnvVar, Seccomp+","+UserNS)
	if Enabled || Off(Seccomp) || Off(UserNS) || len(Active()) != 0 {
		t.Fatalf("switches on in a build without the berthtest tag: Enabled=%v Active=%v", Enabled, Active())
	}
}
