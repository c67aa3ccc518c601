//go:build adversarial

package adversarial

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func advVolume(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	_ = d.c.DeleteVolume(ctx, name)
	if _, err := d.c.CreateVolume(ctx, name, 64<<20); err != nil {
		t.Fatalf("create volume %s: %v", name, err)
	}
	t.Cleanup(func() { _ = d.c.DeleteVolume(context.Background(), name) })
}

// TestVolumeSymlinksStayInside: a writer plants symlinks to /etc and to
// the host canary inside a volume; a second sandbox that mounts it, the
// files API, snapshot, fork and rm never reach the host's files. The
// negative control reads the sandbox's own /etc through the same link,
// so the probe does follow links (inside the sandbox).
func TestVolumeSymlinksStayInside(t *testing.T) {
	ctx := context.Background()
	advVolume(t, "adv-vol-links")
	sandbox(t, api.CreateSandboxRequest{Name: "adv-vol-w", Isolation: isolation, Volumes: []api.VolumeMount{{Name: "adv-vol-links", Path: "/data"}}})
	canary := etcCanary()
	r := run(t, "adv-vol-w", "ln -s /etc /data/etc-link && ln -s "+canary+" /data/canary-link && ln -s ../../../../../../.. /data/up && echo sandbox-own > /etc/berth-own-marker && echo ok")
	if r.ExitCode != 0 {
		t.Fatalf("plant links: %+v", r)
	}
	if err := d.c.Destroy(ctx, "adv-vol-w"); err != nil {
		t.Fatal(err)
	}
	sandbox(t, api.CreateSandboxRequest{Name: "adv-vol-r", Isolation: isolation, Volumes: []api.VolumeMount{{Name: "adv-vol-links", Path: "/data", ReadOnly: true}}})
	run(t, "adv-vol-r", "echo reader-own > /etc/berth-own-marker")
	hostCanary, err := os.ReadFile(canary)
	if err != nil {
		t.Fatal(err)
	}
	// Through the links, inside the reader: the host canary is absent.
	r = run(t, "adv-vol-r", "cat /data/canary-link /data/etc-link/"+strings.TrimPrefix(canary, "/etc/")+" /data/up/"+strings.TrimPrefix(canary, "/")+" 2>&1; true")
	if strings.Contains(r.Stdout, string(hostCanary)) {
		t.Fatalf("the host canary was read through a volume symlink: %q", r.Stdout)
	}
	// Negative control: the same link resolves to the reader's own /etc.
	if got := strings.TrimSpace(run(t, "adv-vol-r", "cat /data/etc-link/berth-own-marker").Stdout); got != "reader-own" {
		t.Fatalf("control: /data/etc-link/berth-own-marker reads %q, want the reader's own file", got)
	}
	// The files API resolves the links inside the sandbox too.
	rc, err := d.c.ReadFile(ctx, "adv-vol-r", "/data/canary-link")
	if err == nil {
		b := make([]byte, 4096)
		n, _ := rc.Read(b)
		rc.Close()
		if strings.Contains(string(b[:n]), string(hostCanary)) {
			t.Fatal("the files API read the host canary through a volume symlink")
		}
	}
	// Host-side volume operations never follow them.
	if _, err := d.c.SnapshotVolume(ctx, "adv-vol-links", "adv-vol-links-s"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.ForkVolume(ctx, "adv-vol-links", "adv-vol-links-f", 0); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Destroy(ctx, "adv-vol-r"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"adv-vol-links-s", "adv-vol-links-f", "adv-vol-links"} {
		if err := d.c.DeleteVolume(ctx, n); err != nil {
			t.Fatalf("rm %s: %v", n, err)
		}
	}
	if _, err := os.Stat(canary); err != nil {
		t.Fatalf("host canary gone after rm of a volume linking to it: %v", err)
	}
	checkCanaries(t)
}

// TestVolumeMountPathSymlink: a sandbox replaces the parent of its
// volume's mount path with a symlink to the host's /etc (a host path if
// anything resolved it on the host) and sleeps. The wake refuses the
// mount (400) and the sandbox stays asleep; nothing appears in or is
// mounted over the host's /etc. The first start, with a directory
// there, is the negative control.
func TestVolumeMountPathSymlink(t *testing.T) {
	ctx := context.Background()
	advVolume(t, "adv-vol-path")
	name := "adv-vol-p"
	sandbox(t, api.CreateSandboxRequest{Name: name, Isolation: isolation, Volumes: []api.VolumeMount{{Name: "adv-vol-path", Path: "/srv/mnt/v"}}})
	if r := run(t, name, "echo in-volume > /srv/mnt/v/f && mv /srv/mnt /srv/mnt-old && ln -s /etc /srv/mnt && echo ok"); r.ExitCode != 0 {
		t.Fatalf("plant a symlink at the mount path's parent: %+v", r)
	}
	if err := d.c.Sleep(ctx, name); err != nil {
		t.Fatal(err)
	}
	_, err := d.c.Exec(ctx, name, api.ExecRequest{Command: "true"})
	if !errdefs.IsKind(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("wake through a symlinked mount path: want invalid argument naming the symlink, got %v", err)
	}
	if _, err := os.Lstat("/etc/v"); err == nil {
		t.Fatal("host /etc/v exists: the mount path was resolved on the host")
	}
	if ms, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(ms), " /etc/v ") || strings.Contains(string(ms), " /etc ") {
		t.Fatal("something is mounted on the host's /etc")
	}
	sb, err := d.c.Get(ctx, name)
	if err != nil || sb.State != api.StateSleeping {
		t.Fatalf("after a refused wake: %+v %v", sb, err)
	}
	// The volume was released and kept its data.
	v, err := d.c.GetVolume(ctx, "adv-vol-path")
	if err != nil || v.Writer != "" {
		t.Fatalf("claim after a refused wake: %+v %v", v, err)
	}
	checkCanaries(t)
}

// TestVolumeHostilePaths: mount paths and names that traverse are
// refused with 400 before anything is made; a plain path is the control.
func TestVolumeHostilePaths(t *testing.T) {
	ctx := context.Background()
	advVolume(t, "adv-vol-h")
	for _, vm := range []api.VolumeMount{
		{Name: "adv-vol-h", Path: "/data/../etc"},
		{Name: "adv-vol-h", Path: "/proc/sys"},
		{Name: "adv-vol-h", Path: "relative"},
		{Name: "adv-vol-h", Path: "/"},
		{Name: "../adv-vol-h", Path: "/data"},
		{Name: "adv-vol-h/..", Path: "/data"},
	} {
		_, err := d.c.Create(ctx, api.CreateSandboxRequest{Name: "adv-vol-bad", Isolation: isolation, Volumes: []api.VolumeMount{vm}})
		if !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			t.Errorf("mount %+v: want invalid argument, got %v", vm, err)
			_ = d.c.Destroy(ctx, "adv-vol-bad")
		}
	}
	if _, err := d.c.CreateVolume(ctx, "..", 0); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Errorf("volume named ..: %v", err)
	}
	// Control.
	sandbox(t, api.CreateSandboxRequest{Name: "adv-vol-ok", Isolation: isolation, Volumes: []api.VolumeMount{{Name: "adv-vol-h", Path: "/data"}}})
	// Bind tricks: the sandbox's root can neither bind a path over or
	// into its volume nor make a device node there; a plain file is the
	// control.
	r := run(t, "adv-vol-ok", "mkdir -p /data/x; mount --bind /etc /data/x 2>/dev/null; echo bind=$?; mknod /data/null c 1 3 2>/dev/null; echo mknod=$?; touch /data/plain; echo touch=$?")
	if !strings.Contains(r.Stdout, "touch=0") {
		t.Fatalf("control: a plain file cannot be made in the volume: %+v", r)
	}
	if strings.Contains(r.Stdout, "bind=0") || strings.Contains(r.Stdout, "mknod=0") {
		t.Fatalf("a bind mount or device node was made in a volume: %q", r.Stdout)
	}
	checkCanaries(t)
}
