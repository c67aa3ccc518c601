//go:build adversarial

package adversarial

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/weaken"
)

// etcCanary is the host canary under /etc; its base name is what the
// files-API probes ask for.
func etcCanary() string { return "/etc/berth-adv-canary" + advID }

// TestFilesAPIPaths: hostile paths in the files API resolve inside the
// sandbox or are refused with 4xx; the host canary is never read or
// written (checklist #7).
func TestFilesAPIPaths(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "adv-files"})
	run(t, "adv-files", "ln -s / /home/user/root-link && chown -h user /home/user/root-link")
	hostSecret := "host canary " + etcCanary()
	for _, p := range []string{
		"../../../../../.." + etcCanary(), "/home/user/root-link" + etcCanary(), "root-link/../../.." + etcCanary(),
		"/proc/1/root" + etcCanary(), "/proc/self/root" + etcCanary(), "/proc/self/cwd/../../.." + etcCanary(),
		"/.berth/../../.." + etcCanary(),
	} {
		if rc, err := d.c.ReadFile(ctx, "adv-files", p); err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if strings.Contains(string(b), hostSecret) {
				t.Fatalf("read %q returned the host canary", p)
			}
		}
		_ = d.c.WriteFile(ctx, "adv-files", p, strings.NewReader("overwritten"), 0o644)
		checkCanaries(t)
	}
	for _, p := range []string{"bad\x00path", strings.Repeat("a", 5000), "\xff\xfe", "/" + strings.Repeat("a/", 3000)} {
		if _, err := d.c.Stat(ctx, "adv-files", p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("path %q: want invalid argument, got %v", p[:min(len(p), 20)], err)
		}
	}
}

// raceSetup makes /home/user/race with a real dir d holding a file named
// like the host canary, and a symlink l -> /etc, then starts the racer
// swapping them for dur.
func raceSetup(t *testing.T, name string, dur time.Duration) string {
	t.Helper()
	base := filepath.Base(etcCanary())
	run(t, name, "mkdir -p /home/user/race/d && echo inside > /home/user/race/d/"+base+" && ln -sfn /etc /home/user/race/l && chown -R user:user /home/user/race")
	p, err := d.c.StartProcess(context.Background(), name, api.StartProcessRequest{
		Command: probePath + " race /home/user/race /etc " + dur.String(), User: "user",
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	return p.ID
}

// hammer reads (and, if write, writes) race/d/<canary> through the files
// API until dur passes; it returns how many reads returned the host canary
// and how many operations ran.
func hammer(t *testing.T, name string, dur time.Duration, write bool) (leaks, ops int) {
	ctx := context.Background()
	p := "/home/user/race/d/" + filepath.Base(etcCanary())
	for deadline := time.Now().Add(dur); time.Now().Before(deadline); {
		if rc, err := d.c.ReadFile(ctx, name, p); err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if strings.Contains(string(b), "host canary") {
				leaks++
			}
		}
		ops++
		if write {
			_ = d.c.WriteFile(ctx, name, p, strings.NewReader("overwritten by the race"), 0o644)
			_, _ = d.c.ListFiles(ctx, name, "/home/user/race/d", false)
			ops += 2
		}
	}
	return leaks, ops
}

// TestSymlinkExchangeRace is CVE-2018-15664: while the sandbox swaps a
// directory and a symlink to /etc with renameat2(RENAME_EXCHANGE), the
// host hammers download, upload and list on a path through the directory
// for 30 s; the host canary under /etc is never read or written (checklist
// #8). Negative control: with files-confine off (a host-side path join),
// the same race leaks the canary.
func TestSymlinkExchangeRace(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "adv-race"})
	raceSetup(t, "adv-race", 32*time.Second)
	leaks, ops := hammer(t, "adv-race", 30*time.Second, true)
	checkCanaries(t)
	if leaks > 0 {
		t.Fatalf("%d of %d reads returned the host canary", leaks, ops)
	}
	t.Logf("FIGURE race: %d files-API operations in 30 s, no host access", ops)
	t.Run("negative/"+weaken.FilesConfine, func(t *testing.T) {
		withWeakened(t, weaken.FilesConfine, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-race-weak"})
			raceSetup(t, "adv-race-weak", 12*time.Second)
			leaks, ops := hammer(t, "adv-race-weak", 10*time.Second, false)
			if leaks == 0 {
				t.Fatalf("with files-confine off no read of %d returned the host canary", ops)
			}
			t.Logf("detected: %d of %d reads returned the host canary", leaks, ops)
		})
	})
}
