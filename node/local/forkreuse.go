package local

import (
	"context"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/store"
)

// forkSnap remembers the snapshot a fork took of a sandbox: its id, the
// sandbox incarnation (record ID) it was taken of, and a time read before
// the flush and the freeze that made its frozen copy.
type forkSnap struct {
	id        string
	sandboxID string
	copied    time.Time
}

// ctimeSlack covers the kernel's coarse timestamps: an inode changed at
// real time t gets a ctime no earlier than t minus one clock tick (at most
// 10 ms at HZ=100). A change counts as "after the copy" from copied minus
// this slack on, which errs towards taking a new snapshot.
const ctimeSlack = 50 * time.Millisecond

// reusableForkSnapshot returns the source's last fork snapshot when a new
// fork may stand on it instead of taking another: it still exists and does
// not expire soon, the sandbox is the same incarnation with the same chain
// below it, the wall clock has not been stepped since, and no inode in the
// upper has a ctime from the copy on. Every change to an upper (a write,
// truncate, chmod, chown, xattr, link, rename, create or delete, a copy-up
// creating a new inode) sets the ctime of an inode in it to the current
// time, and user space cannot set a ctime, so an upper whose inodes all
// have older ctimes holds exactly the tree the snapshot copied. The walk
// runs under the actor lock while the sandbox keeps running: a change
// during the walk either shows (an inode not yet visited) or happened
// after the walk began, so the reused snapshot is the sandbox's state at
// that moment, as a fresh one would be at its freeze. Costs one lstat per
// inode (the 10k-file bench upper: tens of ms) instead of a capture.
func (m *Manager) reusableForkSnapshot(ctx context.Context, source string) (api.Snapshot, bool, error) {
	if err := m.snapshotsReady(); err != nil {
		return api.Snapshot{}, false, err
	}
	a, err := m.lock(ctx, source)
	if err != nil {
		return api.Snapshot{}, false, err
	}
	defer a.mu.Unlock()
	last := a.forkSnap
	if !a.exists || last.id == "" || last.sandboxID != a.rec.ID {
		return api.Snapshot{}, false, nil
	}
	// A stepped wall clock (wall time elapsed differs from monotonic)
	// makes ctimes incomparable with copied.
	now := time.Now()
	if d := now.Round(0).Sub(last.copied.Round(0)) - now.Sub(last.copied); d > ctimeSlack || d < -ctimeSlack {
		a.forkSnap = forkSnap{}
		return api.Snapshot{}, false, nil
	}
	sn, err := m.st.GetSnapshot(ctx, last.id)
	if err != nil || sn.Sandbox != a.name || sn.BaseImageDigest != a.rec.ImageDigest ||
		sn.Tenant != a.rec.Tenant || !sn.ExpiresAt.After(now.Add(time.Hour)) ||
		!chainExtends(sn.Chain, a.rec.Chain, last.id) {
		a.forkSnap = forkSnap{}
		return api.Snapshot{}, false, nil
	}
	if changed := changedSince(m.cfg.Rootfs.UpperDir(a.rec.ID), last.copied.Add(-ctimeSlack)); changed != "" {
		m.cfg.Logf("fork %s: not reusing snapshot %s: %s changed since", source, last.id, changed)
		a.forkSnap = forkSnap{}
		return api.Snapshot{}, false, nil
	}
	m.touch(a)
	return snapToAPI(sn), true, nil
}

// chainExtends reports whether chain is base plus one layer, id.
func chainExtends(chain, base []store.Layer, id string) bool {
	if len(chain) != len(base)+1 || chain[len(base)].ID != id {
		return false
	}
	for i := range base {
		if chain[i] != base[i] {
			return false
		}
	}
	return true
}

// changedSince returns the first path under dir (dir included, as "."
// relative to it; symlinks not followed) whose inode has a ctime at or
// after t, or "" if there is none. An error counts as a change.
func changedSince(dir string, t time.Time) string {
	limit := t.UnixNano()
	changed := ""
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok || st.Ctim.Nano() >= limit {
			changed, _ = filepath.Rel(dir, p)
			return fs.SkipAll
		}
		return nil
	})
	if err != nil && changed == "" {
		return "(walk failed: " + err.Error() + ")"
	}
	return changed
}
