package server

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	streamTotal = 20 << 20
	streamFirst = 1 << 20
)

// gate blocks a stream after its first part until the other side has seen
// that part. A server that buffered whole bodies would deadlock here, and
// the wait's timeout turns that into a failure.
func waitGate(gate <-chan struct{}) error {
	select {
	case <-gate:
		return nil
	case <-time.After(10 * time.Second):
		return errTimeout
	}
}

func TestUploadStreams20MB(t *testing.T) {
	f := newFake()
	firstSeen := make(chan struct{})
	var got int64
	var sum [32]byte
	f.writeFn = func(ctx context.Context, name, path string, r io.Reader, mode uint32) error {
		if name != "box" || path != "/work/big.bin" || mode != 0o600 {
			t.Errorf("write %q %q %o", name, path, mode)
		}
		h := sha256.New()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			h.Write(buf[:n])
			if got < streamFirst && got+int64(n) >= streamFirst {
				close(firstSeen)
			}
			got += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
		copy(sum[:], h.Sum(nil))
		return nil
	}
	ts := newTestServer(t, f, nil)

	pr, pw := io.Pipe()
	want := sha256.New()
	go func() {
		src := &countingReader{left: streamTotal}
		tee := io.TeeReader(src, want)
		if _, err := io.CopyN(pw, tee, streamFirst); err != nil {
			pw.CloseWithError(err)
			return
		}
		if err := waitGate(firstSeen); err != nil {
			pw.CloseWithError(errors.New("server did not stream the upload to the backend"))
			return
		}
		_, err := io.Copy(pw, tee)
		pw.CloseWithError(err)
	}()
	r := do(t, ts, "PUT", "/v1/sandboxes/box/files/content?path=/work/big.bin&mode=0600", pr)
	if r.status != 204 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if got != streamTotal || string(sum[:]) != string(want.Sum(nil)) {
		t.Fatalf("backend got %d bytes (want %d), hash match %v", got, streamTotal, string(sum[:]) == string(want.Sum(nil)))
	}
}

type gatedReader struct {
	src   *countingReader
	gate  <-chan struct{}
	fail  error // returned after the first part instead of waiting
	waits int
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if g.src.read.Load() == streamFirst && g.waits == 0 {
		g.waits++
		if g.fail != nil {
			return 0, g.fail
		}
		if err := waitGate(g.gate); err != nil {
			return 0, errors.New("client never received the first part: server buffers downloads")
		}
	}
	if rest := streamFirst - g.src.read.Load(); rest > 0 && int64(len(p)) > rest {
		p = p[:rest] // stop exactly at the gate
	}
	return g.src.Read(p)
}

func (g *gatedReader) Close() error { return nil }

func TestDownloadStreams20MB(t *testing.T) {
	f := newFake()
	gate := make(chan struct{})
	f.readFn = func(ctx context.Context, name, path string) (io.ReadCloser, error) {
		if path != "/work/big.bin" {
			return nil, errdefs.NotFound("%s not found", path)
		}
		return &gatedReader{src: &countingReader{left: streamTotal}, gate: gate}, nil
	}
	ts := newTestServer(t, f, nil)
	req, _ := http.NewRequest("GET", ts.URL+"/v1/sandboxes/box/files/content?path=/work/big.bin", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	// Letters: detected as text from the first bytes, before the rest.
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/plain; charset=utf-8" || res.Header.Get(api.BinaryHeader) != "false" {
		t.Fatalf("%d %v", res.StatusCode, res.Header)
	}
	h := sha256.New()
	if _, err := io.CopyN(h, res.Body, streamFirst); err != nil {
		t.Fatal(err)
	}
	close(gate)
	n, err := io.Copy(h, res.Body)
	if err != nil || n+streamFirst != streamTotal {
		t.Fatalf("got %d more bytes, err %v", n, err)
	}
	want := sha256.New()
	io.Copy(want, &countingReader{left: streamTotal})
	if string(h.Sum(nil)) != string(want.Sum(nil)) {
		t.Fatal("downloaded content differs")
	}

	// Missing file: a JSON 404 before any byte.
	r := do(t, ts, "GET", "/v1/sandboxes/box/files/content?path=/nope", nil)
	if r.status != 404 || r.apiError(t).Code != "not_found" {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

// A download that fails midway must look broken to the client, not like a
// complete shorter file.
func TestDownloadErrorMidStreamAborts(t *testing.T) {
	f := newFake()
	f.readFn = func(ctx context.Context, name, path string) (io.ReadCloser, error) {
		return &gatedReader{src: &countingReader{left: streamTotal}, fail: errdefs.Unavailable("agent died")}, nil
	}
	ts := newTestServer(t, f, nil)
	req, _ := http.NewRequest("GET", ts.URL+"/v1/sandboxes/box/files/content?path=/x", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	n, err := io.Copy(io.Discard, res.Body)
	if err == nil {
		t.Fatalf("read %d bytes and a clean EOF from a failed download", n)
	}
}

func TestFileRoutes(t *testing.T) {
	f := newFake()
	var removed string
	f.removedFn = func(name, path string, recursive bool) {
		if recursive {
			removed = path
		}
	}
	ts := newTestServer(t, f, nil)
	var list api.FileList
	r := do(t, ts, "GET", "/v1/sandboxes/box/files?path=/w&recursive=true", nil)
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil || len(list.Files) != 1 {
		t.Fatalf("list %d %s", r.status, r.body)
	}
	var ex api.ExistsResponse
	r = do(t, ts, "GET", "/v1/sandboxes/box/files/exists?path=/yes", nil)
	if json.Unmarshal(r.body, &ex) != nil || !ex.Exists {
		t.Fatalf("exists %s", r.body)
	}
	var fi api.FileInfo
	r = do(t, ts, "GET", "/v1/sandboxes/box/files/stat?path=/etc/hostname", nil)
	if json.Unmarshal(r.body, &fi) != nil || fi.Path != "/etc/hostname" {
		t.Fatalf("stat %s", r.body)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/sandboxes/box/files/mkdir", `{"path":"/w/a/b","mode":493}`},
		{"POST", "/v1/sandboxes/box/files/rename", `{"from":"/w/a","to":"/w/c"}`},
		{"DELETE", "/v1/sandboxes/box/files?path=/w/c&recursive=1", ``},
	} {
		if r := do(t, ts, c.method, c.path, strings.NewReader(c.body)); r.status != 204 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	if removed != "/w/c" {
		t.Fatalf("recursive remove of %q", removed)
	}
	r = do(t, ts, "POST", "/v1/images/import?name=mine", strings.NewReader(strings.Repeat("t", 3<<20)))
	var img api.Image
	if r.status != 200 || json.Unmarshal(r.body, &img) != nil || img.Size != 3<<20 {
		t.Fatalf("import of a body over the JSON cap: %d %s", r.status, r.body)
	}
}

// The files routes hand ?user=, ?session=, ?hidden= and ?type= to the
// backend as agentclient.FileOptions in the request context, and a write
// without ?mode= asks for no mode (an existing file keeps its own).
func TestFileOptionsReachTheBackend(t *testing.T) {
	f := newFake()
	var got agentclient.FileOptions
	var gotMode uint32 = 1
	f.writeFn = func(ctx context.Context, name, path string, r io.Reader, mode uint32) error {
		got, gotMode = agentclient.FileOptionsFrom(ctx), mode
		_, err := io.Copy(io.Discard, r)
		return err
	}
	f.readFn = func(ctx context.Context, name, path string) (io.ReadCloser, error) {
		got = agentclient.FileOptionsFrom(ctx)
		return io.NopCloser(strings.NewReader("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")), nil
	}
	ts := newTestServer(t, f, nil)
	do := func(method, q string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+"/v1/sandboxes/box/files/content?"+q, strings.NewReader("x"))
		req.Header.Set("Authorization", "Bearer "+testKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	if res := do("PUT", "path=a.txt&user=root&session=s1"); res.StatusCode != 204 {
		t.Fatalf("put: %d", res.StatusCode)
	}
	if got.User != "root" || got.Session != "s1" || gotMode != 0 {
		t.Fatalf("backend got %+v, mode %o", got, gotMode)
	}
	res := do("GET", "path=pic&session=s2")
	if got.Session != "s2" || res.Header.Get("Content-Type") != "image/png" || res.Header.Get(api.BinaryHeader) != "true" {
		t.Fatalf("read: %+v %v", got, res.Header)
	}
	for _, q := range []string{"path=a&session=..", "path=a&session=a%2Fb", "path=a&user=a%0Ab"} {
		if res := do("GET", q); res.StatusCode != 400 {
			t.Errorf("%s: %d, want 400", q, res.StatusCode)
		}
	}
	// hidden and type on their routes.
	req, _ := http.NewRequest("GET", ts.URL+"/v1/sandboxes/box/files?path=/w&hidden=false", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 || !f.fileOpts.HideDotFiles {
		t.Fatalf("list: %v %v %+v", res, err, f.fileOpts)
	}
	req, _ = http.NewRequest("GET", ts.URL+"/v1/sandboxes/box/files?path=/w&hidden=maybe", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 400 {
		t.Fatalf("list hidden=maybe: %v %v", res, err)
	}
	req, _ = http.NewRequest("DELETE", ts.URL+"/v1/sandboxes/box/files?path=/w&type=file", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 204 || f.fileOpts.RemoveType != "file" {
		t.Fatalf("delete type=file: %v %v %+v", res, err, f.fileOpts)
	}
	req, _ = http.NewRequest("DELETE", ts.URL+"/v1/sandboxes/box/files?path=/w&type=socket", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 400 {
		t.Fatalf("delete type=socket: %v %v", res, err)
	}
}
