package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"golang.org/x/sys/unix"
)

func TestFilesLargeRoundTrip(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	data := make([]byte, 50<<20)
	rand.Read(data)
	want := sha256.Sum256(data)
	p := filepath.Join(a.Dir, "deep", "er", "big.bin")
	// A reader that is neither bytes.Reader nor Buffer: sent chunked.
	if err := c.WriteFile(ctx, p, io.MultiReader(bytes.NewReader(data)), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := c.ReadFile(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, rc)
	rc.Close()
	if err != nil || n != int64(len(data)) {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	if !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("sha256 differs after the round trip")
	}
	fi, err := c.Stat(ctx, p)
	if err != nil || fi.Type != "file" || fi.Size != int64(len(data)) || fi.Mode != 0o600 || fi.Name != "big.bin" || fi.Path != p {
		t.Fatalf("stat: %+v %v", fi, err)
	}
	// No temp file is left beside it.
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only big.bin", len(entries))
	}
}

// failingReader delivers some bytes and then fails, like a host whose
// upload source broke.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("source broke")
	}
	k := min(len(p), f.n)
	f.n -= k
	return k, nil
}

func TestWriteFileIsAtomic(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	p := filepath.Join(a.Dir, "atomic.txt")
	if err := c.WriteFile(ctx, p, strings.NewReader("old contents"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, p, &failingReader{n: 1 << 20}, 0); err == nil {
		t.Fatal("a broken upload succeeded")
	}
	got, _ := os.ReadFile(p)
	if string(got) != "old contents" {
		t.Fatalf("a broken upload changed the file: %d bytes", len(got))
	}
	// The agent removes the temp file once it sees the upload fail,
	// which may be just after the client has returned.
	deadline := time.Now().Add(10 * time.Second)
	for leftover := true; leftover; {
		leftover = false
		entries, _ := os.ReadDir(a.Dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".berth-upload-") {
				leftover = true
				if time.Now().After(deadline) {
					t.Fatalf("temp file %s left behind", e.Name())
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o644 {
		t.Fatalf("default mode %v", fi.Mode())
	}
}

func TestWriteFileOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	a, c := newClient(t)
	// Through the raw API: the Go client always writes as the default
	// user; the user parameter is for the server layer.
	hc := rawHTTP(a.Socket)
	q := url.Values{"path": {filepath.Join(a.TesterHome, "new", "dir", "f.txt")}, "user": {"tester"}, "mode": {"0640"}}
	req, _ := http.NewRequest(http.MethodPut, "http://agent/v1/files/content?"+q.Encode(), strings.NewReader("hi"))
	resp, err := hc.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("put: %v %v", resp, err)
	}
	resp.Body.Close()
	for _, p := range []string{"new", "new/dir", "new/dir/f.txt"} {
		fi, err := os.Stat(filepath.Join(a.TesterHome, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("%s owned by %d:%d, want tester", p, st.Uid, st.Gid)
		}
	}
	// Default-user writes and mkdirs are owned by root here.
	if err := c.Mkdir(context.Background(), api.MkdirRequest{Path: filepath.Join(a.Dir, "m1", "m2"), Mode: 0o700}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(a.Dir, "m1", "m2"))
	if fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("mkdir: %v", fi.Mode())
	}
}

func TestFilesListStatMkdirRenameRemove(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	root := filepath.Join(a.Dir, "tree")
	if err := c.Mkdir(ctx, api.MkdirRequest{Path: filepath.Join(root, "a", "b", "c")}); err != nil {
		t.Fatal(err)
	}
	// mkdir -p of an existing directory is fine.
	if err := c.Mkdir(ctx, api.MkdirRequest{Path: filepath.Join(root, "a")}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"top.txt", "a/one.txt", "a/b/c/two.txt"} {
		if err := c.WriteFile(ctx, filepath.Join(root, f), strings.NewReader(f), 0); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink to a directory outside the tree: listed, never followed.
	os.Symlink(a.Home, filepath.Join(root, "link"))
	if err := c.Mkdir(ctx, api.MkdirRequest{Path: filepath.Join(root, "top.txt")}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("mkdir over a file: %v", err)
	}

	flat, err := c.ListFiles(ctx, root, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(root, flat); got != "a link top.txt" {
		t.Fatalf("flat list: %s", got)
	}
	all, err := c.ListFiles(ctx, root, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(root, all); got != "a a/b a/b/c a/b/c/two.txt a/one.txt link top.txt" {
		t.Fatalf("recursive list: %s", got)
	}
	for _, fi := range all {
		if fi.Name == "link" && (fi.Type != "symlink" || fi.Target != a.Home) {
			t.Fatalf("symlink entry %+v", fi)
		}
		if fi.Name == "b" && fi.Type != "dir" {
			t.Fatalf("dir entry %+v", fi)
		}
	}
	if _, err := c.ListFiles(ctx, filepath.Join(root, "top.txt"), false); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("list of a file: %v", err)
	}

	st, err := c.Stat(ctx, filepath.Join(root, "link"))
	if err != nil || st.Type != "symlink" {
		t.Fatalf("stat is lstat: %+v %v", st, err)
	}
	if _, err := c.Stat(ctx, filepath.Join(root, "missing")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("stat missing: %v", err)
	}
	if _, err := c.ReadFile(ctx, filepath.Join(root, "missing")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("read missing: %v", err)
	}
	if _, err := c.ReadFile(ctx, root); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("read a directory: %v", err)
	}

	if err := c.Rename(ctx, api.RenameRequest{From: filepath.Join(root, "top.txt"), To: filepath.Join(root, "a", "moved.txt")}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"top.txt": false, "a/moved.txt": true, "nope/x": false} {
		ok, err := c.Exists(ctx, filepath.Join(root, p))
		if err != nil || ok != want {
			t.Fatalf("exists %s: %v %v", p, ok, err)
		}
	}
	if err := c.Remove(ctx, filepath.Join(root, "a"), false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("non-recursive remove of a full dir: %v", err)
	}
	if err := c.Remove(ctx, filepath.Join(root, "a"), true); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, filepath.Join(root, "a"), true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("remove missing: %v", err)
	}
	if err := c.Remove(ctx, filepath.Join(root, "link"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Home); err != nil {
		t.Fatal("removing a symlink removed its target")
	}
	if err := c.Remove(ctx, "/", true); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("remove /: %v", err)
	}
}

func TestRelativePathsUseDefaultHome(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	if err := c.WriteFile(ctx, "rel/notes.txt", strings.NewReader("x"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(a.Home, "rel", "notes.txt")); err != nil {
		t.Fatal(err)
	}
	fi, err := c.Stat(ctx, "rel/notes.txt")
	if err != nil || fi.Path != filepath.Join(a.Home, "rel", "notes.txt") {
		t.Fatalf("stat: %+v %v", fi, err)
	}
}

func names(root string, fis []api.FileInfo) string {
	var out []string
	for _, fi := range fis {
		rel, _ := filepath.Rel(root, fi.Path)
		out = append(out, rel)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// rawHTTP talks to the agent without agentclient, to send what the Go
// client would never send.
func rawHTTP(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
}

func TestPathValidation(t *testing.T) {
	a, c := newClient(t)
	hc := rawHTTP(a.Socket)
	bad := map[string]string{
		"NUL":        a.Dir + "/a\x00b",
		"too long":   a.Dir + "/" + strings.Repeat("x", 4096),
		"non-UTF-8":  a.Dir + "/\xff\xfe",
		"empty path": "",
	}
	endpoints := []struct{ method, path string }{
		{http.MethodGet, "/v1/files/content"},
		{http.MethodPut, "/v1/files/content"},
		{http.MethodGet, "/v1/files/list"},
		{http.MethodGet, "/v1/files/stat"},
		{http.MethodGet, "/v1/files/exists"},
		{http.MethodDelete, "/v1/files"},
	}
	for name, p := range bad {
		for _, ep := range endpoints {
			req, _ := http.NewRequest(ep.method, "http://agent"+ep.path+"?"+url.Values{"path": {p}}.Encode(), strings.NewReader("data"))
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var e api.Error
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || jsonCode(b, &e) != "invalid_argument" {
				t.Errorf("%s %s with %s path: HTTP %d %s", ep.method, ep.path, name, resp.StatusCode, b)
			}
		}
		// JSON-bodied endpoints, raw: encoding/json would turn invalid
		// UTF-8 into U+FFFD, so the server checks the body bytes.
		for _, ep := range []string{"/v1/files/mkdir", "/v1/files/rename", "/v1/exec"} {
			body := `{"path":"` + p + `","from":"` + p + `","to":"` + a.Dir + `/x","argv":["true"],"cwd":"` + p + `"}`
			if p == "" || strings.Contains(p, "\x00") {
				continue // not expressible as a raw JSON string
			}
			resp, err := hc.Post("http://agent"+ep, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e api.Error
			if resp.StatusCode != http.StatusBadRequest || jsonCode(b, &e) != "invalid_argument" {
				t.Errorf("POST %s with %s path: HTTP %d %s", ep, name, resp.StatusCode, b)
			}
		}
		// The same through agentclient, which refuses before sending.
		ctx := context.Background()
		errs := []error{}
		_, err := c.Stat(ctx, p)
		errs = append(errs, err)
		errs = append(errs, c.Mkdir(ctx, api.MkdirRequest{Path: p}))
		errs = append(errs, c.Rename(ctx, api.RenameRequest{From: p, To: a.Dir + "/x"}))
		errs = append(errs, c.Rename(ctx, api.RenameRequest{From: a.Dir + "/x", To: p}))
		_, err = c.Exec(ctx, api.ExecRequest{Argv: []string{"true"}, Cwd: p}, nil, nil)
		if p != "" { // an empty cwd means the default
			errs = append(errs, err)
		}
		for i, err := range errs {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s path, call %d: %v", name, i, err)
			}
		}
	}
}

func jsonCode(b []byte, e *api.Error) string {
	if err := jsonUnmarshal(b, e); err != nil {
		return ""
	}
	return e.Code
}

func TestListCap(t *testing.T) {
	a := agenttest.StartWith(t, func(c *agent.Config) { c.MaxListEntries = 10 })
	c := agentclient.New(a.Socket)
	defer c.Close()
	ctx := context.Background()
	dir := filepath.Join(a.Dir, "many")
	os.Mkdir(dir, 0o755)
	for i := 0; i < 10; i++ {
		os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), nil, 0o644)
	}
	if fis, err := c.ListFiles(ctx, dir, false); err != nil || len(fis) != 10 {
		t.Fatalf("10 entries: %d %v", len(fis), err)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if _, err := c.ListFiles(ctx, dir, false); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("11 entries: %v", err)
	}
}

// TestListTooDeepIsAnError: a recursive listing that meets a directory
// whose path is longer than PATH_MAX fails with ResourceExhausted instead
// of silently leaving the deep subtree out (found by the adversarial
// suite's deep-tree test, checklist #21).
func TestListTooDeepIsAnError(t *testing.T) {
	a := agenttest.Start(t)
	c := agentclient.New(a.Socket)
	defer c.Close()
	top := filepath.Join(a.Dir, "deep")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(top, 0o755))
	fd, err := unix.Open(top, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	must(err)
	name := strings.Repeat("d", 200)
	for i := 0; i < 25; i++ { // 25 * 201 bytes > 4096
		must(unix.Mkdirat(fd, name, 0o755))
		next, err := unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		must(err)
		unix.Close(fd)
		fd = next
	}
	unix.Close(fd)
	if fis, err := c.ListFiles(context.Background(), top, true); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("deep list: %d entries, %v; want ResourceExhausted", len(fis), err)
	}
	if fis, err := c.ListFiles(context.Background(), top, false); err != nil || len(fis) != 1 {
		t.Fatalf("shallow list: %d %v", len(fis), err)
	}
	// Clean up from the bottom with *at calls (RemoveAll copes too).
	os.RemoveAll(top)
}
