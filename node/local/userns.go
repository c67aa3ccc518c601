package local

import (
	"context"
	"fmt"
	"os"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/weaken"
	"github.com/berth-sh/berth/rootfs"
	"github.com/berth-sh/berth/store"
)

// Default user namespace ranges: 65536 ids per sandbox (a full 16-bit uid
// space, so images with nobody=65534 work) from host id 2^28 up, below 2^31
// so a range never reaches ids that some tools treat as negative.
const (
	DefaultUserNSBase  = 1 << 28
	DefaultUserNSSize  = 1 << 16
	DefaultUserNSCount = (1<<31 - DefaultUserNSBase) / DefaultUserNSSize
)

// UserNSConfig is where sandboxes' host id ranges come from. Each sandbox
// gets its own range, never shared with another sandbox of this daemon:
// slot i is [Base+i*Size, Base+(i+1)*Size).
type UserNSConfig struct {
	Base, Size uint32
	Count      int // number of slots
}

func (c *UserNSConfig) defaults() {
	if c.Base == 0 {
		c.Base = DefaultUserNSBase
	}
	if c.Size == 0 {
		c.Size = DefaultUserNSSize
	}
	if c.Count == 0 && uint64(c.Base) < 1<<31 {
		// Host ids stay below 2^31 (tools that read ids as signed 32-bit
		// go wrong above it); a base at or above it has no ranges, and
		// the daemon refuses one at start.
		c.Count = int((1<<31 - uint64(c.Base)) / uint64(c.Size))
	}
}

// userNS returns the sandbox's mapping, allocating its range on its first
// start. The allocation is persisted before the range is used, so a crash
// never lets two sandboxes share one. Callers hold a.mu.
func (m *Manager) userNS(ctx context.Context, a *actor) (IDRange, error) {
	if weaken.Off(weaken.UserNS) {
		return IDRange{}, nil
	}
	if a.rec.HostUID == 0 {
		if err := m.allocateHostUID(ctx, a); err != nil {
			return IDRange{}, err
		}
	}
	return IDRange{HostID: a.rec.HostUID, Size: m.cfg.UserNS.Size}, nil
}

func (m *Manager) allocateHostUID(ctx context.Context, a *actor) error {
	m.idMu.Lock()
	defer m.idMu.Unlock()
	recs, err := m.listOwned(ctx) // ranges are per node
	if err != nil {
		return err
	}
	used := map[uint32]bool{}
	for _, r := range recs {
		if r.HostUID != 0 && r.Name != a.name {
			used[r.HostUID] = true
		}
	}
	c := m.cfg.UserNS
	for i := 0; i < c.Count; i++ {
		h := c.Base + uint32(i)*c.Size
		if !used[h] && !m.pools.holdsUID(h) { // a warm pool member's is taken too
			a.rec.HostUID = h
			if err := m.save(ctx, a); err != nil {
				a.rec.HostUID = 0
				return err
			}
			return nil
		}
	}
	return errdefs.ResourceExhausted("no free user namespace range: all %d ranges of %d ids from host id %d are in use", c.Count, c.Size, c.Base)
}

// chownTo hands a host directory that is bind-mounted into the sandbox to
// the sandbox's root (the agent's socket dir): in a user namespace, host
// root's files are owned by nobody there.
func chownTo(dir string, r IDRange) error {
	if r.Size == 0 {
		return nil
	}
	if err := os.Chown(dir, int(r.HostID), int(r.HostID)); err != nil {
		return fmt.Errorf("hand %s to the sandbox's root: %w", dir, err)
	}
	return nil
}

// isolation validates a create request's isolation and applies the default.
func (m *Manager) isolation(req string) (string, error) {
	if req == "" {
		req = m.cfg.DefaultIsolation
	}
	if req == "" {
		req = api.IsolationRunc
	}
	if req != api.IsolationRunc && req != api.IsolationGVisor {
		return "", errdefs.InvalidArgument("isolation must be %q or %q, got %q", api.IsolationRunc, api.IsolationGVisor, req)
	}
	offered := m.cfg.Isolations
	if len(offered) == 0 {
		offered = []string{api.IsolationRunc}
	}
	for _, o := range offered {
		if o == req {
			return req, nil
		}
	}
	return "", errdefs.FailedPrecondition("isolation %q is not available on this host (offered: %v); install runsc for gvisor", req, offered)
}

func isolationOf(r store.Sandbox) string {
	if r.Isolation == "" {
		return api.IsolationRunc
	}
	return r.Isolation
}

// rootfsAsMappedRoot runs fn as the sandbox's mapped root (see
// rootfs.AsMappedRoot).
var rootfsAsMappedRoot = rootfs.AsMappedRoot
