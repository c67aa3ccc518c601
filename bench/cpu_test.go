package bench

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCPUClock(t *testing.T) {
	a, ok := readCPU(os.Getpid(), "")
	if !ok || a.HostMs <= 0 || a.DaemonMs < 0 || a.SandboxesMs != -1 {
		t.Fatalf("readCPU = %+v, %v", a, ok)
	}
	// Burn some CPU in this process: its own clock must advance.
	x := 0
	for i := 0; i < 300_000_000; i++ {
		x += i
	}
	_ = x
	b, _ := readCPU(os.Getpid(), "")
	if b.DaemonMs <= a.DaemonMs {
		t.Errorf("process clock did not advance: %v → %v", a.DaemonMs, b.DaemonMs)
	}
	if _, ok := processCPU(1 << 30); ok {
		t.Error("processCPU of a pid that cannot exist: ok")
	}

	v2, v1 := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(v2, "cpu.stat"), []byte("usage_usec 2500\nuser_usec 2000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v1, "cpuacct.usage"), []byte("7000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ms, ok := cgroupCPU(v2); !ok || ms != 2.5 {
		t.Errorf("v2 cgroup = %v %v, want 2.5", ms, ok)
	}
	if ms, ok := cgroupCPU(v1); !ok || ms != 7 {
		t.Errorf("v1 cgroup = %v %v, want 7", ms, ok)
	}
	if _, ok := cgroupCPU(t.TempDir()); ok {
		t.Error("cgroupCPU of a dir without either file: ok")
	}

	p := cpuPer(cpuClock{HostMs: 100, DaemonMs: 10, SandboxesMs: -1}, cpuClock{HostMs: 300, DaemonMs: 50, SandboxesMs: 5}, 4)
	if p.HostMs != 50 || p.DaemonMs == nil || *p.DaemonMs != 10 || p.SandboxesMs != nil || p.N != 4 {
		t.Errorf("cpuPer = %+v", p)
	}
	if cpuPer(a, b, 0) != nil {
		t.Error("cpuPer over no operations is not nil")
	}
}
