package agentclient

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

func testTar(t *testing.T, end bool, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range []string{"a", "b"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size)}); err != nil {
			t.Fatal(err)
		}
		tw.Write(bytes.Repeat([]byte{'x'}, size))
	}
	if end {
		tw.Close()
	} else {
		tw.Flush()
	}
	return buf.Bytes()
}

// archiveAgent is a fake agent whose GET /v1/archive runs h.
func archiveAgent(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	sock := filepath.Join(shortDir(t), "agent.sock")
	fakeAgent(t, sock, h)
	c := New(sock)
	t.Cleanup(c.Close)
	return c
}

func serveTar(data []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", wire.ArchiveContentType)
		w.Write(data)
	}
}

func readAllArchive(c *Client) ([]byte, error) {
	rc, err := c.ReadArchive(context.Background(), "/work", ArchiveOptions{})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func TestReadArchiveRequiresEndMarker(t *testing.T) {
	complete := testTar(t, true, 100)
	got, err := readAllArchive(archiveAgent(t, serveTar(complete)))
	if err != nil || !bytes.Equal(got, complete) {
		t.Fatalf("complete archive: %d bytes, %v", len(got), err)
	}
	// Cut at an entry boundary and ended cleanly at the HTTP level: a
	// tar reader alone would take this for a complete, shorter archive.
	cut := testTar(t, false, 100)
	if _, err := tar.NewReader(bytes.NewReader(cut)).Next(); err != nil {
		t.Fatal(err)
	}
	_, err = readAllArchive(archiveAgent(t, serveTar(cut)))
	if !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("archive without end marker: %v", err)
	}
	_, err = readAllArchive(archiveAgent(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(complete)
	}))
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "content type") {
		t.Fatalf("wrong content type: %v", err)
	}
}

func TestReadArchiveForwardsQuery(t *testing.T) {
	var got string
	c := archiveAgent(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.RawQuery
		serveTar(testTar(t, true, 1))(w, r)
	})
	rc, err := c.ReadArchive(context.Background(), "/w s", ArchiveOptions{Exclude: []string{"*.log", "node_modules"}, Gitignore: true})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	if got != "exclude=%2A.log&exclude=node_modules&gitignore=1&path=%2Fw+s" {
		t.Fatalf("query %q", got)
	}
	for _, bad := range []string{"", "a\x00b", "\xff"} {
		if _, err := c.ReadArchive(context.Background(), bad, ArchiveOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("path %q: %v", bad, err)
		}
	}
	if _, err := c.ReadArchive(context.Background(), "/w", ArchiveOptions{Exclude: []string{"\xff"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("non-UTF-8 pattern: %v", err)
	}
}

// TestReadArchiveStall: an agent that stops sending mid-archive is
// declared dead after StallTimeout; a caller that is slow to read is not.
func TestReadArchiveStall(t *testing.T) {
	data := testTar(t, true, 4<<20) // more than the socket buffers hold
	c := archiveAgent(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("path") == "/hang" {
			w.Header().Set("Content-Type", wire.ArchiveContentType)
			w.Write(data[:4096])
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		serveTar(data)(w, r)
	})
	c.StallTimeout = 150 * time.Millisecond

	// The backstop turns a watchdog that never fires into a failure, not
	// a hung test.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := c.ReadArchive(ctx, "/hang", ArchiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(rc)
	rc.Close()
	if !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "nothing received") {
		t.Fatalf("stalled agent: %v", err)
	}

	rc, err = c.ReadArchive(context.Background(), "/ok", ArchiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	buf := make([]byte, 64<<10)
	if _, err := io.ReadFull(rc, buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * c.StallTimeout) // a slow consumer: the agent is blocked on us
	rest, err := io.ReadAll(rc)
	if err != nil || len(rest)+len(buf) != len(data) {
		t.Fatalf("slow consumer: %d bytes, %v", len(rest)+len(buf), err)
	}
}

func TestWriteArchiveStallAndSlowSource(t *testing.T) {
	c := archiveAgent(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("path") == "/hang" {
			<-r.Context().Done() // never reads the body
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		json.NewEncoder(w).Encode(ArchiveResult{Files: 1, Bytes: n})
	})
	c.StallTimeout = 150 * time.Millisecond
	ctx := context.Background()

	backstop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	big := bytes.NewReader(make([]byte, 64<<20))
	_, err := c.WriteArchive(backstop, "/hang", big, "")
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "stopped reading") {
		t.Fatalf("agent that stops reading: %v", err)
	}

	// A source slower than the stall timeout (a slow blob download) is
	// not a stalled agent.
	slow := &slowReader{chunks: 3, delay: 3 * c.StallTimeout}
	res, err := c.WriteArchive(ctx, "/ok", slow, "tester")
	if err != nil || res.Bytes != 3 {
		t.Fatalf("slow source: %+v %v", res, err)
	}
}

type slowReader struct {
	chunks int
	delay  time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.chunks == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.delay)
	s.chunks--
	p[0] = 'x'
	return 1, nil
}

func TestWriteArchiveQueryAndErrors(t *testing.T) {
	var got string
	c := archiveAgent(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.RawQuery
		io.Copy(io.Discard, r.Body)
		if r.URL.Query().Get("path") == "/bad" {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"code": "invalid_argument", "message": "restore: refusing archive entry"})
			return
		}
		w.Write([]byte(`{"files":2,"dirs":1,"bytes":10}`))
	})
	ctx := context.Background()
	res, err := c.WriteArchiveWith(ctx, "/w", strings.NewReader("tar"), WriteArchiveOptions{User: "tester", PreserveOwner: true})
	if err != nil || res != (ArchiveResult{Files: 2, Dirs: 1, Bytes: 10}) {
		t.Fatalf("result %+v %v", res, err)
	}
	if got != "path=%2Fw&preserveOwner=1&user=tester" {
		t.Fatalf("query %q", got)
	}
	if _, err := c.WriteArchive(ctx, "/bad", strings.NewReader("tar"), ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("agent error kind lost: %v", err)
	}
	if _, err := c.WriteArchive(ctx, "", strings.NewReader("tar"), ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("empty path: %v", err)
	}
}
