package local

import (
	"context"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/weaken"
	"github.com/berth-sh/berth/store"
)

// Ownership in a cluster. Every node shares one state store, and each
// sandbox record names the node that owns it (store.Sandbox.Owner, with
// OwnerEpoch counting the changes of owner). This node sees, runs, writes
// and deletes only the sandboxes it owns; moving a sandbox is the control
// plane's decision (store.Takeover, made when the owner is dead or
// drained), and it bumps the record's Version, so a write this node
// prepared under the old owner fails its optimistic check. A node that was
// paused past its heartbeat and comes back finds its sandboxes owned
// elsewhere: Fence stops their stale containers without writing a thing.
//
// On a single host (Config.NodeName empty) none of this applies: every
// record is this node's.

// mine reports whether rec is this node's to act on.
func (m *Manager) mine(rec store.Sandbox) bool {
	return m.cfg.NodeName == "" || rec.Owner == m.cfg.NodeName || weaken.Off(weaken.Fencing)
}

// owned keeps the records this node owns.
func (m *Manager) owned(recs []store.Sandbox) []store.Sandbox {
	if m.cfg.NodeName == "" {
		return recs
	}
	out := recs[:0:0]
	for _, r := range recs {
		if m.mine(r) {
			out = append(out, r)
		}
	}
	return out
}

// listOwned lists the records of the sandboxes this node owns: what it
// reconciles, allocates user namespaces among, and reports as its load.
func (m *Manager) listOwned(ctx context.Context) ([]store.Sandbox, error) {
	recs, err := m.st.List(ctx)
	if err != nil {
		return nil, err
	}
	return m.owned(recs), nil
}

// notMine is the error for a request that reached this node for a sandbox
// another node owns: the forwarding layer routes by the record, so this
// happens only while a sandbox moves, and a retry finds the new owner.
func notMine(rec store.Sandbox) error {
	return errdefs.Unavailable("sandbox %q is owned by node %q (epoch %d), not this one; retry: the request is routed to its owner",
		rec.Name, rec.Owner, rec.OwnerEpoch)
}

// claimUnowned makes this node the owner of a record that has none (one
// written by a single-host berth before it joined a cluster). The write
// is conditional on the record's Version, so of two nodes claiming at once
// one wins and the other sees the winner's record.
func (m *Manager) claimUnowned(ctx context.Context, rec store.Sandbox) (store.Sandbox, error) {
	rec.Owner, rec.OwnerEpoch = m.cfg.NodeName, rec.OwnerEpoch+1
	v, err := m.st.Put(ctx, rec)
	if err != nil {
		if errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
			return m.st.Get(ctx, rec.Name)
		}
		return store.Sandbox{}, err
	}
	rec.Version = v
	m.journal(ctx, rec.Name, "claim", m.cfg.NodeName)
	return rec, nil
}

// checkWrite refuses a write of rec by a node that no longer owns it. The
// record was read as this node's (lockAny refuses others), so the refusal
// fires when the actor's copy was handed to another owner in memory, which
// only a bug does; the store's Version check catches the common case, a
// takeover that happened in the store.
func (m *Manager) checkWrite(rec store.Sandbox) error {
	if m.cfg.NodeName == "" || weaken.Off(weaken.Fencing) {
		return nil
	}
	if rec.Owner != m.cfg.NodeName {
		return errdefs.FailedPrecondition("sandbox %q: this node (%s) is fenced: the record is owned by %q", rec.Name, m.cfg.NodeName, rec.Owner)
	}
	return nil
}

// deleteOwned deletes name's record if it is still this node's.
func (m *Manager) deleteOwned(ctx context.Context, name string) error {
	if m.cfg.NodeName != "" {
		rec, err := m.st.Get(ctx, name)
		if errdefs.IsKind(err, errdefs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !m.mine(rec) {
			return notMine(rec)
		}
	}
	return m.st.Delete(ctx, name)
}

// Fence stops, without writing any record, the compute of every sandbox
// this node runs but no longer owns: the cluster moved it while this node
// was paused or cut off. Its writable layer goes too (the new owner woke
// it from its last persisted state). It returns the names it fenced. The
// membership loop calls it after every heartbeat; on a single host it is
// a no-op.
func (m *Manager) Fence(ctx context.Context) []string {
	if m.cfg.NodeName == "" || weaken.Off(weaken.Fencing) {
		return nil
	}
	m.mu.Lock()
	actors := make([]*actor, 0, len(m.actors))
	for _, a := range m.actors {
		actors = append(actors, a)
	}
	m.mu.Unlock()
	var fenced []string
	for _, a := range actors {
		a.mu.Lock()
		if a.deleted || !a.exists {
			a.mu.Unlock()
			continue
		}
		rec, err := m.st.Get(ctx, a.name)
		lost := errdefs.IsKind(err, errdefs.ErrNotFound) || (err == nil && (rec.Owner != m.cfg.NodeName || rec.OwnerEpoch != a.rec.OwnerEpoch))
		if !lost {
			a.mu.Unlock()
			continue // this node's, or the store is unreachable: decide later
		}
		if err := m.stopCompute(ctx, a); err != nil {
			m.cfg.Logf("fence: sandbox %s: stop stale compute: %v", a.name, err)
		}
		if err := m.cfg.Rootfs.Remove(ctx, a.rec.ID); err != nil {
			m.cfg.Logf("fence: sandbox %s: remove stale writable layer: %v", a.name, err)
		}
		if m.cfg.Egress != nil {
			m.cfg.Egress.Forget(a.name)
		}
		m.drop(a)
		a.mu.Unlock()
		owner := "nobody (destroyed)"
		if err == nil {
			owner = rec.Owner
		}
		m.cfg.Logf("fence: sandbox %s is owned by %s now; stopped its stale container here without writing", a.name, owner)
		fenced = append(fenced, a.name)
	}
	return fenced
}
