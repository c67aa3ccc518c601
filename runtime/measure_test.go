package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestMeasureStartup reports (does not assert) create+start latency of a
// busybox container through OCI and the raw `runc run` of a trivial command
// with the same bundle, p50 of 20 each. Skipped with -short.
func TestMeasureStartup(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	needFixtures(t)
	ctx := context.Background()
	bundle := filepath.Join(t.TempDir(), "bundle")
	rootfs := mountOverlay(t, bundle)
	r := New(fx.runc, fx.runcRoot)
	write := func(args []string) {
		s, err := Spec(SpecOptions{ID: "m", RootfsPath: rootfs, Args: args, CgroupsPath: fx.cgParent + "/measure",
			Limits: Limits{MilliCPU: 1000, MemoryBytes: 256 << 20, Pids: 256}})
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteBundle(bundle, s); err != nil {
			t.Fatal(err)
		}
	}
	const n = 20
	write([]string{"/bin/sleep", "1000"})
	var createStart []time.Duration
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("m%d-%d", os.Getpid(), i)
		t0 := time.Now()
		if err := r.Create(ctx, id, bundle); err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		createStart = append(createStart, time.Since(t0))
		if err := r.Delete(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
	write([]string{"/bin/true"})
	var run []time.Duration
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("r%d-%d", os.Getpid(), i)
		cmd := exec.Command(fx.runc, "--root", fx.runcRoot, "run", "--bundle", bundle, id)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("runc run: %v\n%s", err, out)
		}
		run = append(run, time.Since(t0))
		r.Delete(ctx, id, true)
	}
	mode := "v1 (hybrid: v1 controllers, empty cgroup2 at /sys/fs/cgroup/unified)"
	if Unified() {
		mode = "v2 (unified)"
	}
	t.Logf("cgroups: %s", mode)
	t.Logf("OCI.Create+Start (busybox sleep, seccomp, limits): p50 %v  min %v  max %v", p50(createStart), slices.Min(createStart), slices.Max(createStart))
	t.Logf("raw runc run /bin/true (same bundle):             p50 %v  min %v  max %v", p50(run), slices.Min(run), slices.Max(run))
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
