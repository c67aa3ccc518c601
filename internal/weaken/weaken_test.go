//go:build berthtest

package weaken

import (
	"sync"
	"testing"
)

func TestOffReadsTheEnvironment(t *testing.T) {
	t.Setenv(EnvVar, " seccomp, userns ,")
	once = sync.Once{}
	if !Off(Seccomp) || !Off(UserNS) || Off(Caps) {
		t.Fatalf("switches = %v", Active())
	}
	if got := Active(); len(got) != 2 || got[0] != Seccomp {
		t.Fatalf("Active() = %v", got)
	}
	t.Setenv(EnvVar, "")
	once = sync.Once{}
	if Off(Seccomp) || len(Active()) != 0 {
		t.Fatal("switch still on with the variable empty")
	}
}
