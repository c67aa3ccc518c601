package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

const benchToken = "bench-cluster-token"

// BenchmarkExecSingleHost is the native exec round trip (a buffered exec
// of a command the fake backend answers at once) with no router: what a
// single host runs. Compare it with main's figure for the same benchmark
// to see that forwarding costs a single host nothing measurable.
func BenchmarkExecSingleHost(b *testing.B) {
	benchExec(b, newExecServer(b, nil), "box")
}

// BenchmarkExecClusterOwned is the same exec in a cluster on the node
// that owns the sandbox: one state-store read (SQLite here) per request.
func BenchmarkExecClusterOwned(b *testing.B) {
	st := benchStore(b)
	fwd := forward.New(forward.Config{Self: "n1", Token: benchToken, Records: st, Nodes: st})
	benchPut(b, st, "box", "n1")
	benchExec(b, newExecServer(b, fwd), "box")
}

// BenchmarkExecCrossNode is the exec at n1 of a sandbox n2 owns: the
// forward over loopback HTTP (n1's route caches warm: no store read at
// n1) and n2's own handling, with its record read. Its p50 minus
// BenchmarkExecClusterOwned's is the cross-node overhead (the design's
// target: 1 ms).
func BenchmarkExecCrossNode(b *testing.B) { benchCrossNode(b, 0) }

// BenchmarkExecCrossNodeUncached is the same with n1's route caches off
// (its record and n2's entry read on every request, as before them).
func BenchmarkExecCrossNodeUncached(b *testing.B) { benchCrossNode(b, -1) }

func benchCrossNode(b *testing.B, cacheAge time.Duration) {
	st := benchStore(b)
	n2 := forward.New(forward.Config{Self: "n2", Token: benchToken, Records: st, Nodes: st})
	owner := newExecServer(b, n2)
	nodeL := httptest.NewServer(forward.NewReceiver(forward.ReceiverConfig{Token: benchToken, API: owner.Config.Handler}))
	b.Cleanup(nodeL.Close)
	if _, err := st.PutNode(context.Background(), store.Node{Name: "n2", Addr: nodeL.URL, StartedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	benchPut(b, st, "box", "n2")
	n1 := forward.New(forward.Config{Self: "n1", Token: benchToken, Records: st, Nodes: st, OwnerCacheAge: cacheAge, NodeCacheAge: cacheAge})
	benchExec(b, newExecServer(b, n1), "box")
}

func benchStore(b *testing.B) *sqlite.Store {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

func benchPut(b *testing.B, st *sqlite.Store, name, owner string) {
	if _, err := st.Put(context.Background(), store.Sandbox{Name: name, ID: "id-" + name, State: api.StateRunning, Owner: owner}); err != nil {
		b.Fatal(err)
	}
}

func newExecServer(b *testing.B, fwd forward.Router) *httptest.Server {
	f := newFake()
	f.execFn = func(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		io.WriteString(stdout, "ok\n")
		return api.ExitStatus{}, nil
	}
	o := Options{APIKey: testKey}
	if fwd != nil {
		o.Forward = fwd
	}
	ts := httptest.NewServer(Guard(newServer(f, o), GuardOptions{}))
	b.Cleanup(ts.Close)
	return ts
}

func benchExec(b *testing.B, ts *httptest.Server, name string) {
	c := ts.Client()
	body := `{"command":"true"}`
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs() // allocations are this shared machine's one noise-free figure
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/sandboxes/"+name+"/exec", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		t0 := time.Now()
		res, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(out), "ok") {
			b.Fatalf("%d %s", res.StatusCode, out)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
}
