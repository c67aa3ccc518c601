package runtime

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/rootfs"
)

// TestDiskFillInsideSandbox composes the rootfs package's quota'd overlay
// with a container: dd inside the sandbox stops at the disk limit with
// EDQUOT ("Disk quota exceeded"), checklist #20.
func TestDiskFillInsideSandbox(t *testing.T) {
	needFixtures(t)
	ctx := context.Background()
	m, err := rootfs.Open(ctx, filepath.Join(t.TempDir(), "data"), rootfs.Options{UpperSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(ctx); m.Close() })
	root, err := m.Mount(ctx, "fill", []string{fx.lower}, 32<<20, rootfs.IDMap{})
	if err != nil {
		t.Fatal(err)
	}
	c := newContainerAt(t, root, []string{"/bin/sh", "-c", "dd if=/dev/zero of=/big bs=1M count=64; echo rc=$?"}, nil)
	out := c.run(t, 30*time.Second)
	if !strings.Contains(out, "Disk quota exceeded") || strings.Contains(out, "rc=0") {
		t.Errorf("dd of 64 MiB under a 32 MiB limit:\n%s", out)
	}
}
