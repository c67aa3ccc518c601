package local

import (
	"context"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/node"
	"golang.org/x/sys/unix"
)

// What this node reports about itself (node.Node's Info and Agent).

// LocalNodeID names the single host's node.
const LocalNodeID = "local"

func (c compute) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	return c.m.agentOf(ctx, name)
}

func (c compute) Info(ctx context.Context) (node.Info, error) {
	in, err := c.m.info(ctx)
	if err != nil || c.list == nil {
		return in, err
	}
	// Every image in this host's store counts as held, also one no
	// sandbox started from since the daemon started: placement asks
	// whether a start here needs a pull, and it does not. A failed list
	// leaves what the records and this run's starts name.
	if list, lerr := c.list(ctx); lerr == nil && len(list) > 0 {
		set := make(map[string]bool, len(in.Images)+len(list))
		for _, d := range in.Images {
			set[d] = true
		}
		for _, i := range list {
			if i.Digest != "" {
				set[i.Digest] = true
			}
		}
		in.Images = sortedKeys(set)
	}
	return in, nil
}

// info is the host's capacity (its CPUs, memory and the writable layers'
// filesystem), what the sandboxes were given of it, the starts in flight,
// its isolation backends, and the image and snapshot layers held here.
func (m *Manager) info(ctx context.Context) (node.Info, error) {
	recs, err := m.listOwned(ctx)
	if err != nil {
		return node.Info{}, err
	}
	in := node.Info{ID: LocalNodeID, Capacity: node.Capacity{VCPU: float64(runtime.NumCPU()), MemoryMiB: hostMemoryMiB(), DiskMB: m.cfg.DiskMB}}
	in.Isolation = append([]string(nil), m.cfg.Isolations...)
	if len(in.Isolation) == 0 {
		in.Isolation = []string{api.IsolationRunc}
	}
	images := map[string]bool{}
	for _, r := range recs {
		if r.ImageDigest != "" {
			// Unpacked when the sandbox first started; an image in use
			// is never removed (ImageInUse).
			images[r.ImageDigest] = true
		}
		// Every record keeps its writable layer here, asleep too.
		in.Capacity.UsedDiskMB += r.Resources.DiskMB
		switch r.State {
		case api.StateRunning:
			in.Capacity.Sandboxes++
			in.Capacity.UsedVCPU += r.Resources.VCPU
			in.Capacity.UsedMemoryMiB += r.Resources.MemoryMiB
		case api.StateStarting:
			// A create or wake is persisted as starting before its
			// first step, so this is what is in flight.
			in.Capacity.InFlight++
		}
	}
	for d := range m.held.imageSet() {
		images[d] = true
	}
	in.Images = sortedKeys(images)
	in.SnapshotLayers, in.SnapshotLayerBytes = m.held.layerSizes(func(id string) (int64, bool) {
		// A layer is a snapshot's own blob; its record has the size.
		sn, err := m.st.GetSnapshot(ctx, id)
		return sn.SizeBytes, err == nil
	})
	return in, nil
}

func hostMemoryMiB() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit) >> 20
}

// prepare resolves ref and makes its layers ready on this host,
// remembering the digest for Info.
func (m *Manager) prepare(ctx context.Context, ref string) (Image, error) {
	img, err := m.cfg.Images.Prepare(ctx, ref)
	if err == nil && img.Digest != "" {
		m.held.image(img.Digest)
	}
	return img, err
}

// holdings are the image digests prepared and the snapshot layers
// unpacked on this host since the daemon started (Info adds the images
// its sandboxes' records name).
type holdings struct {
	mu     sync.Mutex
	images map[string]bool
	layers map[string]string // snapshot layer id → sha256 hex
	sizes  map[string]int64  // snapshot layer id → compressed bytes, once known
}

func (h *holdings) image(digest string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.images == nil {
		h.images = map[string]bool{}
	}
	h.images[digest] = true
}

func (h *holdings) layer(id, sum string, cached bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !cached {
		delete(h.layers, id)
		delete(h.sizes, id)
		return
	}
	if h.layers == nil {
		h.layers = map[string]string{}
	}
	h.layers[id] = sum
}

func (h *holdings) imageSet() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]bool, len(h.images))
	for d := range h.images {
		out[d] = true
	}
	return out
}

// layerSizes returns the held layers' digests ("sha256:…", sorted) and
// their compressed sizes, asking size for each layer whose size is not
// known yet (outside the lock: it reads the store). A size that cannot be
// told is left out and asked again next time.
func (h *holdings) layerSizes(size func(id string) (int64, bool)) ([]string, map[string]int64) {
	h.mu.Lock()
	var unknown []string
	for id := range h.layers {
		if _, ok := h.sizes[id]; !ok {
			unknown = append(unknown, id)
		}
	}
	h.mu.Unlock()
	found := map[string]int64{}
	for _, id := range unknown {
		if n, ok := size(id); ok {
			found[id] = n
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sizes == nil {
		h.sizes = map[string]int64{}
	}
	for id, n := range found {
		if _, held := h.layers[id]; held { // not forgotten meanwhile
			h.sizes[id] = n
		}
	}
	set := map[string]bool{}
	var bytes map[string]int64
	for id, sum := range h.layers {
		if !strings.HasPrefix(sum, "sha256:") {
			sum = "sha256:" + sum
		}
		set[sum] = true
		if n, ok := h.sizes[id]; ok {
			if bytes == nil {
				bytes = map[string]int64{}
			}
			bytes[sum] = n
		}
	}
	return sortedKeys(set), bytes
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
