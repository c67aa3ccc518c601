//go:build adversarial

package adversarial

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestPlantedBinariesNeverRunOnHost is CVE-2019-14271's class: the sandbox
// replaces tools and libraries a host-side copy, snapshot or user lookup
// might run (tar, zstd, gzip, getent, sh in odd places, an NSS module and
// nsswitch.conf). Every planted tool writes a marker when run. After a
// snapshot, a backup, file downloads and uploads, directory listings and
// execs as the default user, no marker exists on the host or in the
// sandbox (checklist #9). Negative control: running a planted tool in the
// sandbox does leave the marker, so the trap works.
func TestPlantedBinariesNeverRunOnHost(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "adv-plant"})
	marker := "/tmp/berth-adv-planted-marker" + advID
	os.Remove(marker)
	defer os.Remove(marker)
	trap := "#!/bin/sh\necho ran >> " + marker + "\nexit 1\n"
	tools := []string{"/usr/bin/tar", "/usr/bin/zstd", "/usr/bin/gzip", "/usr/bin/getent", "/usr/local/bin/tar", "/usr/local/sbin/tar", "/bin/tar"}
	for _, p := range tools {
		if err := d.c.WriteFile(ctx, "adv-plant", p, strings.NewReader(trap), 0o755); err != nil {
			t.Logf("plant %s: %v", p, err)
		}
	}
	run(t, "adv-plant", "echo 'passwd: evil files' > /etc/nsswitch.conf && echo 'group: evil files' >> /etc/nsswitch.conf && "+
		"printf 'not an elf' > /usr/lib/x86_64-linux-gnu/libnss_evil.so.2 && mkdir -p /home/user/work && echo data > /home/user/work/f")

	// Everything the host does with a sandbox's files and users.
	if _, err := d.c.Snapshot(ctx, "adv-plant", api.SnapshotRequest{Name: "adv-plant-snap"}); err != nil {
		t.Errorf("snapshot: %v", err)
	} else if list, err := d.c.ListSnapshots(ctx, "adv-plant", ""); err == nil {
		for _, s := range list {
			defer d.c.DeleteSnapshot(ctx, s.ID)
		}
	}
	if b, err := d.c.CreateBackup(ctx, "adv-plant", api.BackupRequest{Dir: "/home/user/work"}); err != nil {
		t.Logf("backup (no blob store configured?): %v", err)
	} else {
		defer d.c.DeleteBackup(ctx, b.ID)
	}
	if rc, err := d.c.ReadFile(ctx, "adv-plant", "/home/user/work/f"); err == nil {
		io.Copy(io.Discard, rc)
		rc.Close()
	} else {
		t.Errorf("download: %v", err)
	}
	if err := d.c.WriteFile(ctx, "adv-plant", "/home/user/work/g", strings.NewReader("x"), 0o644); err != nil {
		t.Errorf("upload: %v", err)
	}
	if _, err := d.c.ListFiles(ctx, "adv-plant", "/home/user", true); err != nil {
		t.Errorf("list: %v", err)
	}
	if r, err := d.c.Exec(ctx, "adv-plant", api.ExecRequest{Argv: []string{"id", "-u"}}); err != nil || strings.TrimSpace(r.Stdout) != "1000" {
		t.Errorf("exec as the default user: %+v %v", r, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("a planted sandbox binary ran on the host (marker %s exists)", marker)
	}
	if r := run(t, "adv-plant", "cat "+marker+" 2>/dev/null || echo none"); strings.TrimSpace(r.Stdout) != "none" {
		t.Errorf("a planted binary ran inside the sandbox on behalf of the host: %q", r.Stdout)
	}
	checkCanaries(t)
	t.Run("negative/trap", func(t *testing.T) {
		run(t, "adv-plant", "/usr/bin/tar --version; true")
		if r := run(t, "adv-plant", "cat "+marker); strings.TrimSpace(r.Stdout) != "ran" {
			t.Fatalf("the planted tar did not leave its marker when run: %q", r.Stdout)
		}
	})
}
