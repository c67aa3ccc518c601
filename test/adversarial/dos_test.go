//go:build adversarial

package adversarial

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/weaken"
)

type bombVerdict struct {
	Forked int    `json:"forked"`
	Stop   string `json:"stop"`
	MS     int64  `json:"ms"`
}

// TestForkBomb: a fork bomb stops at the pids limit with EAGAIN inside;
// the host API keeps answering (p99 logged) and another sandbox can be
// created during the attack; a sandbox full of processes is destroyed
// (time logged) (checklist #18). Negative control: with the pids limit off
// the same bomb reaches its own cap of 3000 processes.
func TestForkBomb(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "adv-bomb"})
	lat := measureAPI()
	var v bombVerdict
	probe(t, "adv-bomb", "user", &v, "forkbomb", "100000")
	t0 := time.Now()
	sandbox(t, api.CreateSandboxRequest{Name: "adv-bomb-bystander"})
	created := time.Since(t0)
	p, err := d.c.StartProcess(ctx, "adv-bomb", api.StartProcessRequest{Command: probePath + " forkbomb 100000 keep", User: "user"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.WaitForLog(ctx, "adv-bomb", p.ID, api.WaitLogRequest{Pattern: "forked", TimeoutMs: 60000}); err != nil {
		t.Logf("wait for the kept bomb: %v", err)
	}
	if r := run(t, "adv-bomb-bystander", "echo fine"); r.Stdout != "fine\n" {
		t.Errorf("bystander during the bomb: %+v", r)
	}
	lat.stop(t, "fork bomb")
	if v.Stop != "EAGAIN" || v.Forked < 20 || v.Forked > 5000 {
		t.Fatalf("fork bomb: %+v, want EAGAIN at the pids limit", v)
	}
	t.Logf("FIGURE fork bomb: %d processes then EAGAIN in %d ms; another sandbox created in %s", v.Forked, v.MS, created.Round(time.Millisecond))
	t0 = time.Now()
	if err := d.c.Destroy(ctx, "adv-bomb"); err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE destroy of a sandbox at its pids limit: %s", time.Since(t0).Round(time.Millisecond))
	t.Run("negative/"+weaken.PIDLimit, func(t *testing.T) {
		withWeakened(t, weaken.PIDLimit, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-bomb-weak"})
			var v bombVerdict
			probe(t, "adv-bomb-weak", "user", &v, "forkbomb", "3000")
			if v.Stop != "max" {
				t.Fatalf("with the pids limit off the bomb still stopped: %+v", v)
			}
		})
	})
}

// TestMemoryHog: allocating past memory.max kills the hog inside its own
// sandbox (oomKilled reported), the sandbox and a bystander keep working,
// the host API keeps answering (checklist #19). Negative control: with the
// memory limit off (weaken memory-limit) the hog is not stopped.
func TestMemoryHog(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "adv-hog", Resources: &api.Resources{VCPU: 0.5, MemoryMiB: 256, DiskMB: 1000}})
	sandbox(t, api.CreateSandboxRequest{Name: "adv-hog-bystander"})
	lat := measureAPI()
	for round := 0; round < 3; round++ {
		res, err := d.c.Exec(ctx, "adv-hog", api.ExecRequest{Argv: []string{"python3", "-c", "b = []\nwhile True:\n    b.append(bytearray(16 << 20))\n"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 137 || res.Signal != "SIGKILL" {
			t.Fatalf("round %d: hog not OOM-killed: %+v", round, res)
		}
	}
	res, err := d.c.Exec(ctx, "adv-hog", api.ExecRequest{Command: "head -c 400M /dev/zero > /dev/shm/fill; echo $?", User: "root"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("/dev/shm fill past the memory limit: exit %d %q", res.ExitCode, strings.TrimSpace(res.Stdout+res.Stderr))
	lat.stop(t, "memory hog")
	sb, err := d.c.Get(ctx, "adv-hog")
	if err != nil || !sb.OOMKilled {
		t.Errorf("oomKilled not reported: %+v %v", sb, err)
	}
	for _, n := range []string{"adv-hog", "adv-hog-bystander"} {
		if r := run(t, n, "echo alive"); r.Stdout != "alive\n" {
			t.Errorf("%s after the hog: %+v", n, r)
		}
	}
	// Negative control: without the memory limit the same 256 MiB sandbox
	// holds twice that, so the probe above would see an unbounded hog.
	t.Run("negative/"+weaken.MemoryLimit, func(t *testing.T) {
		withWeakened(t, weaken.MemoryLimit, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-hog-weak", Resources: &api.Resources{VCPU: 0.5, MemoryMiB: 256, DiskMB: 1000}})
			res, err := d.c.Exec(ctx, "adv-hog-weak", api.ExecRequest{Argv: []string{"python3", "-c",
				"b = [bytearray(16 << 20) for _ in range(32)]\nprint('survived', sum(map(len, b)) >> 20)\n"}})
			if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "survived 512") {
				t.Fatalf("with the memory limit off, 512 MiB in a 256 MiB sandbox still failed: %+v %v", res, err)
			}
		})
	})
}

// TestDiskAndInodeFill: filling the disk with data and then with empty
// files stops inside the sandbox (ENOSPC or EDQUOT); the host's free space
// drops by at most the sandbox's limit and the API keeps answering
// (checklist #20-21). Negative control: with the quota off (weaken
// disk-quota) a write past the limit succeeds.
func TestDiskAndInodeFill(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "adv-disk", Resources: &api.Resources{VCPU: 1, MemoryMiB: 512, DiskMB: 500}})
	// The host's cost is what the sandbox takes from the btrfs filesystem
	// that holds every writable layer (the host root's free space is shared
	// with other work on the machine, so too noisy). Space freed meanwhile
	// by the cleanup of earlier sandboxes only makes the figure smaller.
	//
	// That cost is the blocks the filesystem's image file holds on the
	// host's disk (uppers.img is sparse; discard gives freed blocks back),
	// not the filesystem's own free space: btrfs allocates metadata in
	// chunks of hundreds of MiB, so a million empty files can take a
	// gigabyte of chunk space from statfs while writing far less (measured
	// at 1010 MiB of statfs for 1,006,000 files on a quiet machine). The
	// chunk figure is logged beside it.
	uppers := filepath.Join(dataDir, "uppers")
	image := filepath.Join(dataDir, "uppers.img")
	chunkFree := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(uppers, &st); err != nil {
			t.Fatalf("statfs %s: %v", uppers, err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	free := func() int64 {
		var st syscall.Stat_t
		if err := syscall.Stat(image, &st); err != nil {
			t.Fatalf("stat %s: %v", image, err)
		}
		return -st.Blocks * 512 // less free as the image's blocks grow
	}
	c0 := chunkFree()
	lat := measureAPI()
	f0 := free()
	// Empty files first, then data on top: both count against the one
	// limit, so the host's total growth stays within it.
	var v struct {
		Files int    `json:"files"`
		Stop  string `json:"stop"`
	}
	probe(t, "adv-disk", "user", &v, "inodes", "/home/user/inodes", "3000000", "30s")
	run(t, "adv-disk", "sync") // the host image grows at writeback
	f1 := free()
	res := run(t, "adv-disk", "dd if=/dev/zero of=/home/user/fill bs=1M count=2000 2>&1; echo exit=$?; sync")
	f2 := free()
	lat.stop(t, "disk and inode fill")
	if strings.Contains(res.Stdout, "exit=0") || !(strings.Contains(res.Stdout, "No space left") || strings.Contains(res.Stdout, "quota exceeded")) {
		t.Fatalf("2000 MB into a 500 MB sandbox: %s", res.Stdout)
	}
	t.Logf("FIGURE inode fill: %d empty files in 30 s (stopped by %s); host disk use grew by %d MiB", v.Files, v.Stop, (f0-f1)>>20)
	t.Logf("FIGURE disk fill on top: host disk use grew by %d MiB in all for a 500 MB sandbox (the uppers filesystem's free space, chunk-granular, by %d MiB)", (f0-f2)>>20, (c0-chunkFree())>>20)
	if v.Stop != "ENOSPC" && v.Stop != "EDQUOT" && v.Stop != "time" && v.Stop != "max" {
		t.Errorf("inode fill stopped by %s", v.Stop)
	}
	if f0-f2 > 600<<20 {
		t.Errorf("host disk use grew by %d MiB, more than the 500 MB limit", (f0-f2)>>20)
	}
	if r := run(t, "adv-disk", "rm -f /home/user/fill && echo ok > /home/user/after && cat /home/user/after"); r.Stdout != "ok\n" {
		t.Errorf("after the fill: %+v", r)
	}
	// Negative control: without the quota a write past the limit of a
	// 500 MB sandbox (the smallest disk) succeeds, so the check above would
	// see the hole.
	t.Run("negative/"+weaken.DiskQuota, func(t *testing.T) {
		withWeakened(t, weaken.DiskQuota, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-disk-weak", Resources: &api.Resources{VCPU: 1, MemoryMiB: 512, DiskMB: 500}})
			res := run(t, "adv-disk-weak", "dd if=/dev/zero of=/home/user/fill bs=1M count=700 2>&1; echo exit=$?; sync; rm -f /home/user/fill")
			if !strings.Contains(res.Stdout, "exit=0") {
				t.Fatalf("with the quota off, 700 MB into a 500 MB sandbox still failed: %s", res.Stdout)
			}
		})
	})
}

// TestThreadBomb: starting OS threads stops at the pids limit (threads
// count against it): the bomb's runtime dies with EAGAIN from clone and the
// sandbox keeps working (checklist #18). Negative control: with the pids
// limit off the same bomb reaches its own cap of 3000 threads.
func TestThreadBomb(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "adv-threads"})
	lat := measureAPI()
	res, err := d.c.Exec(ctx, "adv-threads", api.ExecRequest{Argv: []string{probePath, "threads", "100000"}, TimeoutMs: 120000})
	lat.stop(t, "thread bomb")
	if err != nil {
		// The agent shares the pids limit: if it needs a thread while the
		// bomb holds them all, its runtime dies, and the sandbox with it.
		sb, _ := d.c.Get(ctx, "adv-threads")
		t.Logf("FINDING: the exec died with the agent: %v (sandbox state %s %s)", err, sb.State, sb.Error)
		r, err := d.c.Exec(ctx, "adv-threads", api.ExecRequest{Command: "echo alive"})
		if err != nil || r.Stdout != "alive\n" {
			t.Fatalf("sandbox did not recover after its agent died in a thread bomb: %+v %v", r, err)
		}
		return
	}
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "errno=11") {
		t.Fatalf("thread bomb was not stopped by EAGAIN: exit %d, stdout tail %q, stderr head %q", res.ExitCode, lastLine(res.Stdout), res.Stderr[:min(len(res.Stderr), 300)])
	}
	t.Logf("FIGURE thread bomb: stopped after %q", lastLine(res.Stdout))
	if r := run(t, "adv-threads", "echo alive"); r.Stdout != "alive\n" {
		t.Fatalf("sandbox after the thread bomb: %+v", r)
	}
	t.Run("negative/"+weaken.PIDLimit, func(t *testing.T) {
		withWeakened(t, weaken.PIDLimit, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-threads-weak"})
			res, err := d.c.Exec(ctx, "adv-threads-weak", api.ExecRequest{Argv: []string{probePath, "threads", "3000"}, TimeoutMs: 120000})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(lastLine(res.Stdout), `"stop":"max"`) {
				t.Fatalf("with the pids limit off the thread bomb still stopped: %q %q", lastLine(res.Stdout), res.Stderr[:min(len(res.Stderr), 300)])
			}
		})
	})
}
