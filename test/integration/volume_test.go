//go:build integration

package integration

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func volume(t *testing.T, name string, size int64) {
	t.Helper()
	ctx := context.Background()
	_ = d.c.DeleteVolume(ctx, name) // left by an earlier run
	if _, err := d.c.CreateVolume(ctx, name, size); err != nil {
		t.Fatalf("create volume %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := d.c.DeleteVolume(context.Background(), name); err != nil && !errdefs.IsKind(err, errdefs.ErrNotFound) {
			t.Logf("delete volume %s: %v", name, err)
		}
	})
}

func mustRun(t *testing.T, name, command string) string {
	t.Helper()
	r := run(t, name, command)
	if r.ExitCode != 0 {
		t.Fatalf("%s: %q: exit %d: %s %s", name, command, r.ExitCode, r.Stdout, r.Stderr)
	}
	return strings.TrimSpace(r.Stdout)
}

// The rules of issue 17's volumes, with real runc sandboxes.
func TestVolumeRules(t *testing.T) {
	ctx := context.Background()
	volume(t, "it-vol", 64<<20)
	rw := []api.VolumeMount{{Name: "it-vol", Path: "/data"}}

	// A writes (as the image's user and as root); B, made while A holds
	// the volume read-write, is refused naming A.
	sandbox(t, api.CreateSandboxRequest{Name: "it-vol-a", Volumes: rw})
	mustRun(t, "it-vol-a", "echo from-a > /data/f && mkdir -p /data/dir && echo deep > /data/dir/g")
	_, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-vol-b", Volumes: rw})
	if !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "it-vol-a") {
		t.Fatalf("second read-write mount: want failed precondition naming it-vol-a, got %v", err)
	}
	if _, err := d.c.Get(ctx, "it-vol-b"); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("a refused create left a sandbox: %v", err)
	}
	// rm while in use is refused.
	if err := d.c.DeleteVolume(ctx, "it-vol"); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("rm in use: %v", err)
	}

	// A read-only snapshot sees the content as of the snapshot.
	if _, err := d.c.SnapshotVolume(ctx, "it-vol", "it-vol-s1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.c.DeleteVolume(context.Background(), "it-vol-s1") })
	mustRun(t, "it-vol-a", "echo after-snap > /data/f")
	sandbox(t, api.CreateSandboxRequest{Name: "it-vol-r1", Volumes: []api.VolumeMount{{Name: "it-vol-s1", Path: "/snap", ReadOnly: true}}})
	sandbox(t, api.CreateSandboxRequest{Name: "it-vol-r2", Volumes: []api.VolumeMount{{Name: "it-vol-s1", Path: "/snap", ReadOnly: true}, {Name: "it-vol", Path: "/live", ReadOnly: true}}})
	if got := mustRun(t, "it-vol-r1", "cat /snap/f"); got != "from-a" {
		t.Fatalf("snapshot reads %q, want from-a", got)
	}
	if got := mustRun(t, "it-vol-r2", "cat /snap/f /live/f"); got != "from-a\nafter-snap" {
		t.Fatalf("second reader reads %q", got)
	}
	if r := run(t, "it-vol-r1", "echo x > /snap/f"); r.ExitCode == 0 || !strings.Contains(r.Stderr, "Read-only") {
		t.Fatalf("write to a read-only snapshot: %+v", r)
	}
	// A snapshot never mounts read-write.
	if _, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-vol-c", Volumes: []api.VolumeMount{{Name: "it-vol-s1", Path: "/s"}}}); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("rw snapshot: %v", err)
	}

	// A sleeps: it lets go, B mounts read-write and reads what A wrote.
	if err := d.c.Sleep(ctx, "it-vol-a"); err != nil {
		t.Fatal(err)
	}
	v, err := d.c.GetVolume(ctx, "it-vol")
	if err != nil || v.Writer != "" {
		t.Fatalf("after A slept: %+v %v", v, err)
	}
	sandbox(t, api.CreateSandboxRequest{Name: "it-vol-b", Volumes: rw})
	if got := mustRun(t, "it-vol-b", "cat /data/f /data/dir/g"); got != "after-snap\ndeep" {
		t.Fatalf("B reads %q", got)
	}
	// A's wake now finds B writing: refused, A stays asleep.
	_, err = d.c.Exec(ctx, "it-vol-a", api.ExecRequest{Command: "true"})
	if !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("wake of A while B writes: want failed precondition, got %v", err)
	}
	if sb, err := d.c.Get(ctx, "it-vol-a"); err != nil || sb.State != api.StateSleeping {
		t.Fatalf("A after a refused wake: %+v %v", sb, err)
	}

	// Fork is independent both ways.
	if _, err := d.c.ForkVolume(ctx, "it-vol", "it-vol-f", 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.c.DeleteVolume(context.Background(), "it-vol-f") })
	sandbox(t, api.CreateSandboxRequest{Name: "it-vol-f", Volumes: []api.VolumeMount{{Name: "it-vol-f", Path: "/data"}}})
	mustRun(t, "it-vol-f", "echo forked > /data/f")
	mustRun(t, "it-vol-b", "echo origin > /data/f")
	if a, b := mustRun(t, "it-vol-f", "cat /data/f"), mustRun(t, "it-vol-b", "cat /data/f"); a != "forked" || b != "origin" {
		t.Fatalf("fork not independent: fork %q, origin %q", a, b)
	}

	// The volume survives destroying every sandbox that used it.
	for _, n := range []string{"it-vol-a", "it-vol-b", "it-vol-r1", "it-vol-r2", "it-vol-f"} {
		if err := d.c.Destroy(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	v, err = d.c.GetVolume(ctx, "it-vol")
	if err != nil || v.Writer != "" || len(v.Readers) != 0 {
		t.Fatalf("after destroying every user: %+v %v", v, err)
	}
	sandbox(t, api.CreateSandboxRequest{Name: "it-vol-d", Volumes: rw})
	if got := mustRun(t, "it-vol-d", "cat /data/f"); got != "origin" {
		t.Fatalf("after destroy of all: %q", got)
	}

	// The quota holds: 64 MiB volume, a 100 MB write fails with EDQUOT
	// inside the sandbox, and berth reports the usage at the limit.
	r := run(t, "it-vol-d", "dd if=/dev/urandom of=/data/big bs=1M count=100 conv=fsync 2>&1; echo rc=$?")
	if !strings.Contains(r.Stdout, "Disk quota exceeded") && !strings.Contains(r.Stdout, "No space left") {
		t.Fatalf("write past the quota: %+v", r)
	}
	mustRun(t, "it-vol-d", "sync")
	time.Sleep(time.Second)
	v, _ = d.c.GetVolume(ctx, "it-vol")
	if v.UsedBytes < 48<<20 || v.UsedBytes > 65<<20 {
		t.Fatalf("usage after filling: %d bytes of %d", v.UsedBytes, v.SizeBytes)
	}
	// Negative control: below the quota writes work.
	mustRun(t, "it-vol-d", "rm /data/big && sync && dd if=/dev/zero of=/data/small bs=1M count=8 conv=fsync 2>/dev/null")
	t.Logf("quota: %s", strings.TrimSpace(r.Stdout[max(0, len(r.Stdout)-120):]))
}

// Figures: create with a volume vs without (same run), and snapshot and
// fork of a 1 GB volume.
func TestVolumeFigures(t *testing.T) {
	ctx := context.Background()
	volume(t, "it-vol-fig", 2<<30)
	// One warm-up pair, then n interleaved pairs. The start's own step
	// timings (journal "start") give the attach step alone.
	const n = 8
	var plain, withVol time.Duration
	var attach []float64
	stepRE := regexp.MustCompile(`volumes ([0-9.]+)`)
	for i := -1; i < n; i++ {
		for _, vol := range []bool{false, true} {
			name := fmt.Sprintf("it-volfig-%d-%v", i+1, vol)
			req := api.CreateSandboxRequest{Name: name}
			if vol {
				req.Volumes = []api.VolumeMount{{Name: "it-vol-fig", Path: "/data"}}
			}
			t0 := time.Now()
			if _, err := d.c.Create(ctx, req); err != nil {
				t.Fatal(err)
			}
			el := time.Since(t0)
			if i >= 0 && vol {
				withVol += el
				js, err := d.c.Journal(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				// The journal outlives a destroy: the newest start is this run's.
				for k := len(js) - 1; k >= 0; k-- {
					if m := stepRE.FindStringSubmatch(js[k].Detail); js[k].Op == "start" && m != nil {
						f, _ := strconv.ParseFloat(m[1], 64)
						attach = append(attach, f)
						break
					}
				}
			} else if i >= 0 {
				plain += el
			}
			if err := d.c.Destroy(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(attach) != n {
		t.Fatalf("found the volumes step in %d of %d starts", len(attach), n)
	}
	sort.Float64s(attach)
	t.Logf("FIGURE create: without volume %.1f ms, with volume %.1f ms (mean of %d interleaved pairs after a warm-up pair); attach step alone: median %.2f ms, max %.2f ms",
		ms(plain)/n, ms(withVol)/n, n, attach[n/2], attach[n-1])

	sandbox(t, api.CreateSandboxRequest{Name: "it-volfig-w", Volumes: []api.VolumeMount{{Name: "it-vol-fig", Path: "/data"}}})
	mustRun(t, "it-volfig-w", "for i in 0 1 2 3; do dd if=/dev/urandom of=/data/blob$i bs=1M count=256 2>/dev/null; done; sync")
	if err := d.c.Destroy(ctx, "it-volfig-w"); err != nil {
		t.Fatal(err)
	}
	v, _ := d.c.GetVolume(ctx, "it-vol-fig")
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		if _, err := d.c.SnapshotVolume(ctx, "it-vol-fig", fmt.Sprintf("it-vol-fig-s%d", i)); err != nil {
			t.Fatal(err)
		}
		snap := time.Since(t0)
		t0 = time.Now()
		if _, err := d.c.ForkVolume(ctx, "it-vol-fig", fmt.Sprintf("it-vol-fig-f%d", i), 0); err != nil {
			t.Fatal(err)
		}
		fork := time.Since(t0)
		t.Logf("FIGURE volume of %d bytes used: snapshot %.1f ms, fork %.1f ms (API round trip)", v.UsedBytes, ms(snap), ms(fork))
		_ = d.c.DeleteVolume(ctx, fmt.Sprintf("it-vol-fig-s%d", i))
		_ = d.c.DeleteVolume(ctx, fmt.Sprintf("it-vol-fig-f%d", i))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
