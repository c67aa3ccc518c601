//go:build integration

package integration

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// A memory hog is OOM-killed inside its own sandbox; the daemon and other
// sandboxes keep working (adversarial checklist #19).
func TestMemoryHogIsOOMKilledInside(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-hog", Resources: &api.Resources{VCPU: 0.5, MemoryMiB: 256, DiskMB: 1000}})
	sandbox(t, api.CreateSandboxRequest{Name: "it-bystander"})
	res, err := d.c.Exec(ctx, "it-hog", api.ExecRequest{Argv: []string{"python3", "-c", "b = []\nwhile True:\n    b.append(bytearray(16 << 20))\n"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 137 || res.Signal != "SIGKILL" {
		t.Fatalf("hog was not killed by the OOM killer: %+v", res)
	}
	sb, err := d.c.Get(ctx, "it-hog")
	if err != nil || !sb.OOMKilled {
		t.Fatalf("sandbox does not report oomKilled: %+v %v", sb, err)
	}
	if r := run(t, "it-hog", "echo still here"); r.Stdout != "still here\n" {
		t.Fatalf("hog sandbox after OOM: %+v", r)
	}
	if r := run(t, "it-bystander", "echo fine"); r.Stdout != "fine\n" {
		t.Fatalf("other sandbox after OOM: %+v", r)
	}
	if resp, err := http.Get("http://" + d.listen + "/v1/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("daemon health after OOM: %v", err)
	}
}

// A fork bomb stops at the pids limit (adversarial checklist #18).
func TestForkBombStopsAtPidsLimit(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "it-forks", Instance: "lite"})
	res := run(t, "it-forks", `python3 -c "
import os, errno, time, signal
pids = []
try:
    while True:
        pid = os.fork()
        if pid == 0:
            os.close(1); os.close(2)
            time.sleep(20)
            os._exit(0)
        pids.append(pid)
except OSError as e:
    print(len(pids), errno.errorcode[e.errno])
for p in pids:
    os.kill(p, signal.SIGKILL)
    os.waitpid(p, 0)
"`)
	f := strings.Fields(res.Stdout)
	if len(f) != 2 || f[1] != "EAGAIN" {
		t.Fatalf("fork bomb did not hit EAGAIN: %+v", res)
	}
	n, _ := strconv.Atoi(f[0])
	if n < 50 || n > 1024 {
		t.Fatalf("fork bomb made %d processes; the pids limit should stop it near 256", n)
	}
	if r := run(t, "it-forks", "echo recovered"); r.Stdout != "recovered\n" {
		t.Fatalf("sandbox after fork bomb: %+v", r)
	}
}

// Filling the disk stops at the instance's disk limit with ENOSPC or
// EDQUOT inside, and the host's free space is untouched beyond that limit
// (adversarial checklist #20).
func TestDiskFillStopsAtLimit(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "it-disk", Resources: &api.Resources{VCPU: 1, MemoryMiB: 512, DiskMB: 500}})
	var before syscall.Statfs_t
	if err := syscall.Statfs(dataDir, &before); err != nil {
		t.Fatal(err)
	}
	res := run(t, "it-disk", "dd if=/dev/zero of=/home/user/fill bs=1M count=2000 2>&1")
	if res.ExitCode == 0 {
		t.Fatalf("2000 MB write into a 500 MB sandbox succeeded: %+v", res)
	}
	if !strings.Contains(res.Stdout, "No space left") && !strings.Contains(res.Stdout, "quota exceeded") {
		t.Fatalf("want ENOSPC or EDQUOT, got: %s", res.Stdout)
	}
	var after syscall.Statfs_t
	if err := syscall.Statfs(dataDir, &after); err != nil {
		t.Fatal(err)
	}
	used := (int64(before.Bavail) - int64(after.Bavail)) * before.Bsize
	if used > 600<<20 {
		t.Fatalf("host free space dropped by %d MiB, more than the 500 MB limit", used>>20)
	}
	t.Logf("host free space dropped by %d MiB", used>>20)
	// A file write into the full disk is resource_exhausted in the agent's
	// words. The agent reports it as no_space, the kind the E2B face
	// answers 507; native clients still see resource_exhausted (were the
	// wire-only code to leak, the client would rebuild ErrNoSpace).
	err := d.c.WriteFile(context.Background(), "it-disk", "/home/user/more", strings.NewReader(strings.Repeat("x", 4<<20)), 0)
	if !errdefs.IsKind(err, errdefs.ErrResourceExhausted) || errdefs.IsKind(err, errdefs.ErrNoSpace) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("writing a file into the full disk: %v (code %s), want resource_exhausted saying no space left", err, errdefs.WireCode(err))
	}
	// The sandbox recovers once the file is gone.
	if r := run(t, "it-disk", "rm /home/user/fill && echo ok > /home/user/after && cat /home/user/after"); r.Stdout != "ok\n" {
		t.Fatalf("after freeing space: %+v", r)
	}
}
