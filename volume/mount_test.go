package volume

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// A symlink on the sandbox-side path (planted by the image or by an
// earlier run of the sandbox) is refused, not followed out of the root;
// the same path as a plain directory mounts (negative control).
func TestMountPathSymlinkRefused(t *testing.T) {
	ctx := context.Background()
	m := openTest(t, nil)
	if _, err := m.Create(ctx, "v", 0); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for _, tc := range []struct{ name, link, path string }{
		{"final component", "data", "/data"},
		{"parent component", "srv", "/srv/data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeRoot(t)
			if err := os.Symlink(outside, filepath.Join(root, tc.link)); err != nil {
				t.Fatal(err)
			}
			ms := []api.VolumeMount{{Name: "v", Path: tc.path}}
			err := m.Attach(ctx, "s", "", root, ms, zeroMap)
			if !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("want invalid argument, got %v", err)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 || isMountRoot(t, outside) {
				t.Fatalf("the symlink's target outside the root was touched: %v", ents)
			}
			if v, _ := m.Get(ctx, "v"); v.Writer != "" {
				t.Fatalf("a refused attach kept its claim: %+v", v)
			}
			// Negative control: a directory at the same path mounts.
			os.Remove(filepath.Join(root, tc.link))
			if err := m.Attach(ctx, "s", "", root, ms, zeroMap); err != nil {
				t.Fatal(err)
			}
			if !isMountRoot(t, filepath.Join(root, tc.path)) {
				t.Fatal("control: not mounted")
			}
			detachAll(t, m, "s", root, ms)
		})
	}
}

// Detach never follows a path the sandbox changed: with the mount point's
// parent swapped for a symlink to a host directory that is itself a
// mount, nothing on the host is unmounted.
func TestDetachIgnoresSwappedPath(t *testing.T) {
	ctx := context.Background()
	m := openTest(t, nil)
	if _, err := m.Create(ctx, "v", 0); err != nil {
		t.Fatal(err)
	}
	root := fakeRoot(t)
	ms := []api.VolumeMount{{Name: "v", Path: "/srv/v"}}
	if err := m.Attach(ctx, "s", "", root, ms, zeroMap); err != nil {
		t.Fatal(err)
	}
	// The sandbox moves its /srv away and plants /srv -> the host's
	// volumes directory (a host mount holding the volume itself).
	if err := os.Rename(filepath.Join(root, "srv"), filepath.Join(root, "srv2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(m.dir, filepath.Join(root, "srv")); err != nil {
		t.Fatal(err)
	}
	if err := m.Detach(ctx, "s", root, ms); err != nil {
		t.Fatal(err)
	}
	if !isMountRoot(t, filepath.Join(root, "srv2/v")) {
		t.Fatal("the moved mount was unmounted through a path it no longer has")
	}
	if v, _ := m.Get(ctx, "v"); v.Writer != "" {
		t.Fatalf("claim kept: %+v", v)
	}
}

func TestMountPathValidation(t *testing.T) {
	for _, p := range []string{"", "data", "/", "/a/../b", "/a/./b", "/a//b", "/proc", "/etc/x", "/dev", "/a,b", "/x\x00"} {
		if err := api.ValidateVolumePath(p); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			t.Errorf("path %q: want invalid argument, got %v", p, err)
		}
	}
	for _, p := range []string{"/data", "/home/user/work", "/mnt/v-1"} {
		if err := api.ValidateVolumePath(p); err != nil {
			t.Errorf("path %q: %v", p, err)
		}
	}
	if err := api.ValidateVolumeMounts([]api.VolumeMount{{Name: "a", Path: "/x"}, {Name: "b", Path: "/x/y"}}); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Errorf("overlapping paths: %v", err)
	}
}
