package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/metering"
	"github.com/berth-sh/berth/metrics"
	"github.com/berth-sh/berth/network"
	"github.com/berth-sh/berth/rootfs"
	"github.com/berth-sh/berth/runtime"
	"github.com/berth-sh/berth/server"
	"github.com/berth-sh/berth/store"
)

// MetricsConfig configures /metrics and the usage sampler.
type MetricsConfig struct {
	// TokenFile holds the bearer token /metrics wants on the main
	// listener; Listen serves /metrics unauthenticated on an address of
	// its own. Neither: /metrics on the main listener answers 401.
	TokenFile string
	Listen    string
	// History is the per-sandbox usage history kept (default 15 min);
	// Interval the time between samples (default 5 s).
	History, Interval time.Duration
	// NoUsage turns the usage sampler off (no history, no records, no
	// traffic activity): the baseline of its overhead figures.
	NoUsage bool
}

// metricsToken reads --metrics-token-file; "" when none is given.
func (c MetricsConfig) token() (string, error) {
	if c.TokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", fmt.Errorf("--metrics-token-file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if len(t) < 16 {
		return "", fmt.Errorf("--metrics-token-file %s: the token must have at least 16 characters", c.TokenFile)
	}
	return t, nil
}

// newRegistry makes the metrics registry with the node's levels.
func newRegistry(st store.Store, host func() *localNode) *metrics.Registry {
	return metrics.New(metrics.Sources{
		Sandboxes: func(ctx context.Context) map[string]int {
			recs, err := st.List(ctx)
			if err != nil {
				return nil
			}
			by := map[string]int{}
			for _, r := range recs {
				by[r.State]++
			}
			return by
		},
		Pools: func() []api.Pool {
			if h := host(); h != nil {
				return h.mgr.Pools()
			}
			return nil
		},
		QueueDepth: func() int {
			if h := host(); h != nil {
				return h.mgr.StartQueue()
			}
			return 0
		},
		SnapshotBytes: func(ctx context.Context) int64 {
			a, ok := st.(store.Artifacts)
			if !ok {
				return 0
			}
			snaps, err := a.ListSnapshots(ctx, "", "")
			if err != nil {
				return 0
			}
			var n int64
			for _, s := range snaps {
				n += s.SizeBytes
			}
			return n
		},
	})
}

// serveMetricsListener serves /metrics alone, unauthenticated, on addr.
func serveMetricsListener(ctx context.Context, addr string, reg *metrics.Registry, logf func(string, ...any)) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+metrics.Path, reg.Open())
	srv := server.NewHTTPServer("", mux)
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("metrics listener: %v", err)
		}
	}()
	return ln.Addr().String(), nil
}

// usageReader reads a sandbox's counters on the host
// (metering.Reader): cgroups through the runtime selector, the writable
// layer's quota group, the host side of its veth.
type usageReader struct {
	sel    *runtime.Selector
	rfs    *rootfs.Manager
	bridge string
}

func (u usageReader) Read(t metering.Target) (metering.Raw, error) {
	var r metering.Raw
	var err error
	if r.CPU, err = u.sel.CPUUsage(t.ID); err != nil {
		return r, err
	}
	if r.Memory, err = u.sel.MemoryUsage(t.ID); err != nil {
		return r, err
	}
	r.MemoryPeak, _ = u.sel.MemoryPeak(t.ID) // older v2 kernels lack memory.peak
	r.DiskUsed, _ = u.rfs.DiskUsage(t.ID)    // quota groups off: unknown
	// The host side's rx is what the sandbox sent, its tx what it got.
	dir := filepath.Join("/sys/class/net", network.HostVethName(u.bridge, t.ID), "statistics")
	r.NetTx, _ = readCounter(filepath.Join(dir, "rx_bytes"))
	r.NetRx, _ = readCounter(filepath.Join(dir, "tx_bytes"))
	return r, nil
}

func readCounter(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
