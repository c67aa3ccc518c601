//go:build adversarial

package adversarial

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestDeepTreeAndHugeXattrs: a directory tree deeper than PATH_MAX and a
// file with large extended attributes do not break or hang the host-side
// walks (snapshot capture, recursive listing); each finishes or fails
// cleanly, times are logged, and the sandbox still works (checklist #21).
func TestDeepTreeAndHugeXattrs(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "adv-deep"})
	res := run(t, "adv-deep", `python3 -c "
import os
os.chdir('/home/user')
for i in range(3000):
    os.mkdir('dddd')
    os.chdir('dddd')
open('leaf', 'w').write('x')
os.chdir('/home/user')
open('xattrs', 'w').write('x')
for i in range(20):
    try:
        os.setxattr('xattrs', 'user.k%d' % i, b'v' * 3000)
    except OSError as e:
        print('setxattr', i, e)
        break
print('ok')
"`)
	if res.ExitCode != 0 {
		t.Fatalf("building the tree: %+v", res)
	}
	t0 := time.Now()
	snap, err := d.c.Snapshot(ctx, "adv-deep", api.SnapshotRequest{Name: "adv-deep-snap"})
	t.Logf("FIGURE snapshot of a 3000-deep tree: %s (refused: %v)", time.Since(t0).Round(time.Millisecond), err != nil)
	if err == nil {
		defer d.c.DeleteSnapshot(ctx, snap.ID)
	} else if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("snapshot of a deep tree: want success or a clean ResourceExhausted, got %v", err)
	}
	t0 = time.Now()
	list, err := d.c.ListFiles(ctx, "adv-deep", "/home/user", true)
	t.Logf("FIGURE recursive list of a 3000-deep tree: %d entries in %s (refused: %v)", len(list), time.Since(t0).Round(time.Millisecond), err != nil)
	// All of it (3000 dirs, the leaf and xattrs) or a clean refusal, never
	// a silently truncated tree.
	if err == nil && len(list) < 3002 {
		t.Errorf("recursive list returned %d entries of 3002 without an error", len(list))
	} else if err != nil && !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("recursive list of a deep tree: %v", err)
	}
	if r := run(t, "adv-deep", "echo alive"); r.Stdout != "alive\n" {
		t.Fatalf("sandbox after the walks: %+v", r)
	}
	if snap.ID != "" {
		// A sandbox from the snapshot holds the deep leaf.
		sandbox(t, api.CreateSandboxRequest{Name: "adv-deep-restored", Snapshot: snap.ID})
		r := run(t, "adv-deep-restored", `python3 -c "
import os
os.chdir('/home/user')
n = 0
while os.path.isdir('dddd'):
    os.chdir('dddd'); n += 1
print(n, open('leaf').read())
"`)
		t.Logf("restored: %q", r.Stdout)
		if r.Stdout != "3000 x\n" {
			t.Errorf("snapshot lost the deep tree: %+v", r)
		}
	}
	checkCanaries(t)
}
