package remote_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/nodetest"
	"github.com/berth-sh/berth/node/remote"
)

// countingServer serves h on loopback and counts the connections it
// accepts.
func countingServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestExecReusesConnection: execs one after the other share one pooled
// connection. A new TCP connection per exec was most of what a remote exec
// added on loopback (the client closed each answer before its end had
// arrived, which makes the transport throw the connection away).
func TestExecReusesConnection(t *testing.T) {
	fake := nodetest.NewFake(t, nil)
	ctx := ctxT(t)
	if err := fake.Start(ctx, "sb", node.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	srv, conns := countingServer(t, remote.NewHandler(fake, token))
	c := remote.NewClient(srv.URL, token, nil)
	for range 30 { // real host processes: the exit comes while the request waits
		execOnce(t, c, "sb", []string{"true"})
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("30 execs one after the other took %d connections, want 1", n)
	}
}

// flushRecorder records how much of the body had been written at each
// flush.
type flushRecorder struct {
	*httptest.ResponseRecorder
	flushedAt []int
}

func (f *flushRecorder) Flush() {
	f.ResponseRecorder.Flush()
	f.flushedAt = append(f.flushedAt, f.Body.Len())
}

// TestExecExitFrameNotFlushed: the node leaves the exit frame in the
// buffer when its handler returns, so net/http sends it and the body's
// end in one write; flushed alone, the end follows in a second write that
// a fast client does not wait for.
func TestExecExitFrameNotFlushed(t *testing.T) {
	fake := nodetest.NewFake(t, nil)
	fake.ExecFunc = func(context.Context, string, []string, node.ExecOptions) (node.Process, error) {
		return nodetest.Done(3, "out\n"), nil
	}
	if err := fake.Start(context.Background(), "sb", node.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	h := remote.NewHandler(fake, token)
	req := httptest.NewRequest("POST", remote.Prefix+"/sandboxes/sb/exec", strings.NewReader(`{"argv":["x"]}`))
	req.Header.Set("Authorization", "Bearer "+token)
	rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
	h.ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	if rec.Code != 200 || len(body) < 5 {
		t.Fatalf("exec answered %d with %q", rec.Code, body)
	}
	// The body's last frame is the exit frame.
	exitAt := lastFrame(t, body)
	if body[exitAt] != 3 || !bytes.Contains(body[exitAt:], []byte(`"code":3`)) {
		t.Fatalf("last frame %q is not the exit frame", body[exitAt:])
	}
	if len(rec.flushedAt) == 0 {
		t.Fatal("the output frame was not flushed (a line must leave as it is printed)")
	}
	if last := rec.flushedAt[len(rec.flushedAt)-1]; last > exitAt {
		t.Errorf("the exit frame was flushed by the handler (flushes at %v, exit frame at byte %d)", rec.flushedAt, exitAt)
	}
}

// lastFrame returns the offset of the last frame in a well-formed stream.
func lastFrame(t *testing.T, b []byte) int {
	t.Helper()
	at := 0
	for off := 0; off < len(b); {
		if len(b)-off < 5 {
			t.Fatalf("truncated frame head at %d in %q", off, b)
		}
		at = off
		off += 5 + int(binary.BigEndian.Uint32(b[off+1:off+5]))
		if off > len(b) {
			t.Fatalf("truncated frame at %d in %q", at, b)
		}
	}
	return at
}

// writeFrame writes one frame of the exec protocol and flushes it.
func writeFrame(w http.ResponseWriter, typ byte, payload string) {
	var head [5]byte
	head[0] = typ
	binary.BigEndian.PutUint32(head[1:], uint32(len(payload)))
	w.Write(head[:])
	w.Write([]byte(payload))
	w.(http.Flusher).Flush()
}

// TestExecDrainsLateEnd: a node that flushes the exit frame and ends the
// body a little later (another build of this package) still gets its
// connection reused, and one that never ends the body does not hold Wait
// for longer than a moment after the exit frame.
func TestExecDrainsLateEnd(t *testing.T) {
	late := func(delay time.Duration) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", remote.ExecContentType)
			w.WriteHeader(200)
			writeFrame(w, 1, "hi\n")
			writeFrame(w, 3, `{"code":7}`)
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
			}
		}
	}
	srv, conns := countingServer(t, late(5*time.Millisecond))
	c := remote.NewClient(srv.URL, token, nil)
	for range 5 {
		p, err := c.Exec(ctxT(t), "sb", []string{"x"}, node.ExecOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if code, err := p.Wait(ctxT(t)); code != 7 || err != nil {
			t.Fatalf("Wait = %d, %v; want 7", code, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 execs against a node that ends its answers late took %d connections, want 1", n)
	}

	hung, _ := countingServer(t, late(time.Hour))
	c = remote.NewClient(hung.URL, token, nil)
	p, err := c.Exec(ctxT(t), "sb", []string{"x"}, node.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if code, err := p.Wait(ctxT(t)); code != 7 || err != nil {
		t.Fatalf("Wait = %d, %v; want 7", code, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Wait took %v against a node that never ends its answer", d)
	}
}
