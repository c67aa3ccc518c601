package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// holdPy keeps a dict of n entries (or a bytearray of mb MiB of random
// bytes) and, whenever /tmp/ask appears, writes its size and a checksum to
// /tmp/answer: state that only survives if memory does.
const holdPy = `import os, sys, time, zlib
n, mb = int(sys.argv[1]), int(sys.argv[2])
d = {i: str(i) * 10 for i in range(n)}
blob = os.urandom(mb << 20) if mb else b""
open("/tmp/ready", "w").write("1")
while True:
    if os.path.exists("/tmp/ask"):
        os.remove("/tmp/ask")
        s = sum(len(v) for v in d.values())
        open("/tmp/answer.tmp", "w").write("%d %d %d %d" % (os.getpid(), len(d), s, zlib.crc32(blob)))
        os.rename("/tmp/answer.tmp", "/tmp/answer")
    time.sleep(0.02)
`

// criuReady skips unless berth's criu is installed and the fixtures exist.
func criuReady(t *testing.T) {
	t.Helper()
	needFixtures(t)
	if _, err := os.Stat(filepath.Join(DefaultCRIUDir, "criu")); err != nil {
		t.Skip("no berth criu (scripts/criu.sh)")
	}
}

// hostOverlay mounts an overlay whose lower is the host's root filesystem
// (for python3) and writes hold.py into it.
func hostOverlay(t *testing.T, dir string) string {
	t.Helper()
	rootfs, upper, work := filepath.Join(dir, "rootfs"), filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{rootfs, upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("overlay", rootfs, "overlay", 0, "lowerdir=/,upperdir="+upper+",workdir="+work+",index=off"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(rootfs, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(rootfs, "tmp/hold.py"), []byte(holdPy), 0o644); err != nil {
		t.Fatal(err)
	}
	return rootfs
}

// holder runs hold.py and a sleeping shell. The shell first moves its
// stdio to files inside the container: CRIU cannot dump an fd on a host
// mount the container does not see (berth's agent.log is one).
func holder(t *testing.T, n, mb int, mem int64) (*ctr, string) {
	t.Helper()
	rootfs := hostOverlay(t, t.TempDir())
	cmd := fmt.Sprintf("exec </dev/null >/tmp/ctr.log 2>&1; python3 /tmp/hold.py %d %d & sleep 100000 & wait", n, mb)
	c := newBundle(t, rootfs, []string{"/bin/sh", "-c", cmd}, func(o *SpecOptions) {
		o.Limits.MemoryBytes = mem
		o.Limits.Pids = 64
	})
	if err := c.r.Run(context.Background(), c.id, c.bundle); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(rootfs, "tmp/ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(rootfs, "tmp/ctr.log"))
			t.Fatalf("hold.py not ready: %s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c, rootfs
}

func ask(t *testing.T, rootfs string) string {
	t.Helper()
	ans := filepath.Join(rootfs, "tmp/answer")
	os.Remove(ans)
	if err := os.WriteFile(filepath.Join(rootfs, "tmp/ask"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(ans); err == nil {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatal("hold.py did not answer")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCheckpointRestoreKeepsProcesses(t *testing.T) {
	criuReady(t)
	c, rootfs := holder(t, 200000, 0, 512<<20)
	before := ask(t, rootfs)
	store := t.TempDir()
	cp, tm, err := c.r.Checkpoint(context.Background(), c.id, store, CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint: %s, %d bytes packed, criu %s, %v", cp.Digest, cp.PackBytes, cp.Meta.CRIUVersion, tm)
	if cp.Meta.CRIUVersion == "" || len(cp.Meta.CPUFlags) == 0 {
		t.Errorf("meta lacks criu version or CPU flags: %+v", cp.Meta)
	}
	if st, err := c.r.State(context.Background(), c.id); err == nil {
		t.Fatalf("container still there after checkpoint: %+v", st)
	}

	// A tampered copy is refused before CRIU reads it...
	bad := t.TempDir()
	p, _ := packPath(store, cp.Digest)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2048] ^= 0xff
	bp, _ := packPath(bad, cp.Digest)
	if err := os.WriteFile(bp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = c.r.Restore(context.Background(), c.id, c.bundle, bad, RestoreOptions{Digest: cp.Digest})
	if !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("tampered restore: %v, want invalid_argument", err)
	}
	if _, err := c.r.State(context.Background(), c.id); err == nil {
		t.Fatal("a container exists after the tampered restore")
	}

	// ...and the untampered one restores, with the same memory.
	tm, err = c.r.Restore(context.Background(), c.id, c.bundle, store, RestoreOptions{Digest: cp.Digest})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restore: %v", tm)
	if tm.Posture == 0 {
		t.Error("posture check did not run after restore")
	}
	after := ask(t, rootfs)
	if after != before {
		t.Fatalf("state after restore %q, before %q", after, before)
	}
	out, err := c.r.run(context.Background(), "ps", c.id)
	if err != nil || !strings.Contains(string(out), "sleep") || !strings.Contains(string(out), "python3") {
		t.Fatalf("processes after restore: %s %v", out, err)
	}
}

// TestRestorePostureFailsClosed: a restore whose process does not match
// its spec's posture (here the spec's bounding set differs) is refused
// and the container removed.
// Negative control: the same restore without the check keeps it running.
func TestRestorePostureFailsClosed(t *testing.T) {
	criuReady(t)
	c, _ := holder(t, 1000, 0, 256<<20)
	store := t.TempDir()
	cp, _, err := c.r.Checkpoint(context.Background(), c.id, store, CheckpointOptions{LeaveRunning: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.r.Delete(context.Background(), c.id, true); err != nil {
		t.Fatal(err)
	}
	// Negative control first: no check, the restore stands.
	if _, err := c.r.Restore(context.Background(), c.id, c.bundle, store, RestoreOptions{Digest: cp.Digest, skipPosture: true}); err != nil {
		t.Fatal(err)
	}
	if st, err := c.r.State(context.Background(), c.id); err != nil || st.Status != "running" {
		t.Fatalf("negative control: %+v %v", st, err)
	}
	if err := c.r.Delete(context.Background(), c.id, true); err != nil {
		t.Fatal(err)
	}
	// The spec now names a bounding set the restored process does not
	// have (CAP_SYS_ADMIN added): VerifyPosture sees a mismatch.
	cfg := filepath.Join(c.bundle, "config.json")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b2 := strings.Replace(string(b), `"bounding":[`, `"bounding":["CAP_SYS_ADMIN",`, 1)
	if b2 == string(b) {
		t.Fatal("no bounding set in config.json")
	}
	if err := os.WriteFile(cfg, []byte(b2), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = c.r.Restore(context.Background(), c.id, c.bundle, store, RestoreOptions{Digest: cp.Digest})
	if !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "posture") {
		t.Fatalf("restore with a posture mismatch: %v, want failed_precondition about posture", err)
	}
	if _, err := c.r.State(context.Background(), c.id); err == nil {
		t.Fatal("container left running after a failed posture check")
	}
}

// TestMeasureCheckpoint: checkpoint and restore time and bytes for 100 MiB
// and 1 GiB of random process memory. A measurement, not a check: it runs
// only with BERTH_MEASURE=1 (it writes over 2 GiB and would only slow CI).
func TestMeasureCheckpoint(t *testing.T) {
	if os.Getenv("BERTH_MEASURE") != "1" {
		t.Skip("measurement: set BERTH_MEASURE=1")
	}
	criuReady(t)
	for _, mb := range []int{100, 1024} {
		c, rootfs := holder(t, 0, mb, int64(mb+256)<<20)
		before := ask(t, rootfs)
		store := t.TempDir()
		t0 := time.Now()
		cp, ct, err := c.r.Checkpoint(context.Background(), c.id, store, CheckpointOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cTotal := time.Since(t0)
		t0 = time.Now()
		rt, err := c.r.Restore(context.Background(), c.id, c.bundle, store, RestoreOptions{Digest: cp.Digest})
		if err != nil {
			t.Fatal(err)
		}
		rTotal := time.Since(t0)
		if after := ask(t, rootfs); after != before {
			t.Fatalf("%d MiB: state %q after, %q before", mb, after, before)
		}
		gib := float64(mb) / 1024
		t.Logf("MEASURE %4d MiB: checkpoint %v (criu %v, pack %v), image %d B, pack %d B; restore %v (verify %v, unpack %v, criu %v, posture %v); %.2f s/GiB checkpoint, %.2f s/GiB restore",
			mb, cTotal.Round(time.Millisecond), ct.CRIU.Round(time.Millisecond), ct.Pack.Round(time.Millisecond),
			cp.Meta.ImageBytes, cp.PackBytes, rTotal.Round(time.Millisecond), rt.Verify.Round(time.Millisecond),
			rt.Unpack.Round(time.Millisecond), rt.CRIU.Round(time.Millisecond), rt.Posture.Round(time.Millisecond),
			cTotal.Seconds()/gib, rTotal.Seconds()/gib)
		if err := c.r.Delete(context.Background(), c.id, true); err != nil {
			t.Fatal(err)
		}
	}
}
