package bench

import (
	"os"
	"path/filepath"
	"testing"
)

// The idle scenario finds the memory and pids controllers beside the CPU
// cgroup it is given (cgroup v1) or in the same dir (v2).
func TestIdleCgroupReads(t *testing.T) {
	root := t.TempDir()
	write := func(rel, v string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// v1: cpuacct/b, memory/b with two sandboxes, pids/b.
	write("v1/cpuacct/b/cpuacct.usage", "5")
	write("v1/memory/b/memory.usage_in_bytes", "3145728")
	write("v1/memory/b/s1/memory.usage_in_bytes", "1048576")
	write("v1/memory/b/s2/memory.usage_in_bytes", "2097152")
	write("v1/pids/b/pids.current", "24")
	cpu := filepath.Join(root, "v1/cpuacct/b")
	mem := memoryCgroup(cpu)
	if mem != filepath.Join(root, "v1/memory/b") {
		t.Fatalf("memory cgroup of %s: %q", cpu, mem)
	}
	if v, ok := cgroupMemory(mem); !ok || v != 3<<20 {
		t.Fatalf("memory: %d %v", v, ok)
	}
	if n, ok := cgroupTasks(cpu); !ok || n != 24 {
		t.Fatalf("tasks: %d %v", n, ok)
	}
	// v2: one dir.
	write("v2/b/memory.current", "4096")
	write("v2/b/pids.current", "3")
	v2 := filepath.Join(root, "v2/b")
	if got := memoryCgroup(v2); got != v2 {
		t.Fatalf("v2 memory cgroup: %q", got)
	}
	if v, ok := cgroupMemory(v2); !ok || v != 4096 {
		t.Fatalf("v2 memory: %d %v", v, ok)
	}
	if n, ok := cgroupTasks(v2); !ok || n != 3 {
		t.Fatalf("v2 tasks: %d %v", n, ok)
	}
	// Negative: no memory controller anywhere, no dir given.
	if got := memoryCgroup(filepath.Join(root, "v1/cpuacct/none")); got != "" {
		t.Fatalf("a missing memory cgroup was found: %q", got)
	}
	if _, ok := cgroupTasks(""); ok {
		t.Fatal("tasks of no cgroup")
	}
}
