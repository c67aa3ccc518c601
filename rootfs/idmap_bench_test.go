package rootfs

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestIDMapCost logs what an idmapped mount adds to a sandbox start.
func TestIDMapCost(t *testing.T) {
	m, _ := openTest(t)
	ctx := context.Background()
	lowers := twoLayers(t)
	for _, c := range []struct {
		name string
		m    IDMap
	}{{"plain", IDMap{}}, {"idmapped", IDMap{HostID: 300000, Size: 65536}}} {
		var total time.Duration
		const n = 20
		for i := 0; i < n; i++ {
			t0 := time.Now()
			if _, err := m.Mount(ctx, "cost", lowers, 0, c.m); err != nil {
				t.Fatal(err)
			}
			total += time.Since(t0)
			if err := m.Unmount(ctx, "cost"); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s mount: %v per start", c.name, total/n)
	}
	t0 := time.Now()
	fd, err := userNSFd(IDMap{HostID: 300000, Size: 65536})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("user namespace fd: %v", time.Since(t0))
	unix.Close(fd)
}
