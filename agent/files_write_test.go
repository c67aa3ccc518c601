package agent_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
)

func inode(t *testing.T, p string) (uint64, os.FileMode, uint32) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Ino, fi.Mode().Perm(), st.Uid
}

// An API write to an existing file is a write: same inode, mode and owner
// unless the request sets the mode.
func TestOverwriteKeepsInodeModeOwner(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	p := filepath.Join(a.Dir, "run.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho old\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o755)
	uid := uint32(os.Geteuid())
	if uid == 0 {
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		uid = 1000
	}
	ino, _, _ := inode(t, p)
	if err := c.WriteFile(ctx, p, strings.NewReader("#!/bin/sh\necho new\n"), 0); err != nil {
		t.Fatal(err)
	}
	gotIno, mode, owner := inode(t, p)
	if gotIno != ino || mode != 0o755 || owner != uid {
		t.Fatalf("after an overwrite: inode %d (was %d), mode %v, owner %d; want the same inode, 0755, %d", gotIno, ino, mode, owner, uid)
	}
	if b, _ := os.ReadFile(p); string(b) != "#!/bin/sh\necho new\n" {
		t.Fatalf("content %q", b)
	}
	// A shorter body leaves no tail of the old content.
	if err := c.WriteFile(ctx, p, strings.NewReader("x"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "x" {
		t.Fatalf("content %q", b)
	}
	// A mode in the request is applied, still in place.
	if err := c.WriteFile(ctx, p, strings.NewReader("y"), 0o600); err != nil {
		t.Fatal(err)
	}
	if gotIno, mode, _ := inode(t, p); gotIno != ino || mode != 0o600 {
		t.Fatalf("with mode 0600: inode %d (was %d), mode %v", gotIno, ino, mode)
	}
	// A new file gets the default 0644.
	q := filepath.Join(a.Dir, "fresh.txt")
	if err := c.WriteFile(ctx, q, strings.NewReader("z"), 0); err != nil {
		t.Fatal(err)
	}
	if _, mode, _ := inode(t, q); mode != 0o644 {
		t.Fatalf("new file mode %v", mode)
	}
	// A write through a symlink writes its target, as a program would.
	l := filepath.Join(a.Dir, "link")
	os.Symlink("run.sh", l)
	if err := c.WriteFile(ctx, l, strings.NewReader("via link"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "via link" {
		t.Fatalf("target content %q", b)
	}
	if fi, _ := os.Lstat(l); fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the symlink was replaced")
	}
}

func rawDo(t *testing.T, a *agenttest.Agent, method, route string, q url.Values, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://agent"+route+"?"+q.Encode(), body)
	resp, err := rawHTTP(a.Socket).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// ?user= is the acting user: relative paths start in that user's home
// (root's included), not the default user's.
func TestRelativePathsFollowTheActingUser(t *testing.T) {
	a := agenttest.StartWith(t, func(cfg *agent.Config) { cfg.DefaultUser = "tester" })
	resp, body := rawDo(t, a, http.MethodPut, "/v1/files/content", url.Values{"path": {"hello.txt"}, "user": {"root"}}, strings.NewReader("hi"))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("put: %d %s", resp.StatusCode, body)
	}
	if _, err := os.Stat(filepath.Join(a.Home, "hello.txt")); err != nil {
		t.Fatalf("as root, hello.txt is not in root's home %s: %v", a.Home, err)
	}
	if _, err := os.Stat(filepath.Join(a.TesterHome, "hello.txt")); err == nil {
		t.Fatal("as root, hello.txt landed in the default user's home")
	}
	resp, body = rawDo(t, a, http.MethodGet, "/v1/files/stat", url.Values{"path": {"hello.txt"}, "user": {"root"}}, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, filepath.Join(a.Home, "hello.txt")) {
		t.Fatalf("stat as root: %d %s", resp.StatusCode, body)
	}
	// Without user: the default user's home.
	resp, _ = rawDo(t, a, http.MethodGet, "/v1/files/exists", url.Values{"path": {"hello.txt"}}, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("exists: %d", resp.StatusCode)
	}
	if resp, body := rawDo(t, a, http.MethodGet, "/v1/files/stat", url.Values{"path": {"x"}, "user": {"nosuch"}}, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown user: %d %s", resp.StatusCode, body)
	}
}

// ?session= resolves relative paths from that session's current directory.
func TestRelativePathsInASession(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	sub := filepath.Join(a.Dir, "proj", "src")
	os.MkdirAll(sub, 0o755)
	info, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SessionExec(ctx, info.ID, api.ExecRequest{Command: "cd " + sub}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	sctx := agentclient.WithFileOptions(ctx, agentclient.FileOptions{Session: "s1"})
	if err := c.WriteFile(sctx, "main.go", strings.NewReader("package main\n"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sub, "main.go")); err != nil {
		t.Fatalf("main.go is not in the session's cwd: %v", err)
	}
	fi, err := c.Stat(sctx, "main.go")
	if err != nil || fi.Path != filepath.Join(sub, "main.go") {
		t.Fatalf("stat in the session: %+v %v", fi, err)
	}
	files, err := c.ListFiles(sctx, ".", false)
	if err != nil || len(files) != 1 || files[0].Name != "main.go" {
		t.Fatalf("list . in the session: %v %v", files, err)
	}
	// Absolute paths are untouched; an unknown session is not found.
	if _, err := c.Stat(sctx, a.Dir); err != nil {
		t.Fatal(err)
	}
	bad := agentclient.WithFileOptions(ctx, agentclient.FileOptions{Session: "nope"})
	if _, err := c.Stat(bad, "main.go"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown session: %v", err)
	}
}

// Reads and metadata carry a detected type and a binary flag.
func TestFileTypes(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00")
	os.WriteFile(filepath.Join(a.Dir, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.WriteFile(filepath.Join(a.Dir, "pic"), png, 0o644)
	fi, err := c.Stat(ctx, filepath.Join(a.Dir, "run.sh"))
	if err != nil || fi.MimeType != "text/x-shellscript; charset=utf-8" || fi.Binary {
		t.Fatalf("stat run.sh: %+v %v", fi, err)
	}
	files, err := c.ListFiles(ctx, a.Dir, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Name == "pic" && (f.MimeType != "image/png" || !f.Binary) {
			t.Fatalf("listing of pic: %+v", f)
		}
	}
	resp, _ := rawDo(t, a, http.MethodGet, "/v1/files/content", url.Values{"path": {filepath.Join(a.Dir, "pic")}}, nil)
	if resp.Header.Get("Content-Type") != "image/png" || resp.Header.Get(api.BinaryHeader) != "true" {
		t.Fatalf("read headers %v", resp.Header)
	}
	dir, _ := c.Stat(ctx, a.Dir)
	if dir.MimeType != "" || dir.Binary {
		t.Fatalf("a directory has a type: %+v", dir)
	}
}

// ?hidden=0 leaves dot files out, and a recursive listing does not enter
// dot directories.
func TestListWithoutHiddenFiles(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	root := filepath.Join(a.Dir, "repo")
	os.MkdirAll(filepath.Join(root, ".git", "objects"), 0o755)
	os.MkdirAll(filepath.Join(root, "src"), 0o755)
	os.WriteFile(filepath.Join(root, ".env"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "src", ".cache"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "src", "a.go"), nil, 0o644)
	hctx := agentclient.WithFileOptions(ctx, agentclient.FileOptions{HideDotFiles: true})
	files, err := c.ListFiles(hctx, root, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(root, files); got != "src src/a.go" {
		t.Fatalf("without hidden files: %q", got)
	}
	all, _ := c.ListFiles(ctx, root, true)
	if got := names(root, all); !strings.Contains(got, ".git/objects") || !strings.Contains(got, ".env") {
		t.Fatalf("the default lists dot files: %q", got)
	}
	if resp, body := rawDo(t, a, http.MethodGet, "/v1/files/list", url.Values{"path": {root}, "hidden": {"maybe"}}, nil); resp.StatusCode != 400 {
		t.Fatalf("hidden=maybe: %d %s", resp.StatusCode, body)
	}
}

// type=file removes a file and refuses a directory, even an empty one
// (which a plain non-recursive remove deletes).
func TestRemoveFileOnly(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	d := filepath.Join(a.Dir, "empty")
	f := filepath.Join(a.Dir, "f.txt")
	os.Mkdir(d, 0o755)
	os.WriteFile(f, nil, 0o644)
	fctx := agentclient.WithFileOptions(ctx, agentclient.FileOptions{RemoveType: "file"})
	if err := c.Remove(fctx, d, false); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("type=file on a directory: %v", err)
	}
	if _, err := os.Stat(d); err != nil {
		t.Fatal("the directory was removed")
	}
	if err := c.Remove(fctx, f, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f); !os.IsNotExist(err) {
		t.Fatal("the file is still there")
	}
	dctx := agentclient.WithFileOptions(ctx, agentclient.FileOptions{RemoveType: "dir"})
	os.WriteFile(f, nil, 0o644)
	if err := c.Remove(dctx, f, false); err == nil {
		t.Fatal("type=dir removed a file")
	}
	if err := c.Remove(dctx, d, false); err != nil {
		t.Fatal(err)
	}
	if resp, body := rawDo(t, a, http.MethodDelete, "/v1/files", url.Values{"path": {f}, "type": {"file"}, "recursive": {"1"}}, nil); resp.StatusCode != 400 {
		t.Fatalf("type=file&recursive=1: %d %s", resp.StatusCode, body)
	}
}
