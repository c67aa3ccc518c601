package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/internal/errdefs"
)

// ent is one entry of a hand-made tar.
type ent struct {
	name, link string
	typ        byte
	body       string
}

func file(name, body string) ent { return ent{name: name, typ: tar.TypeReg, body: body} }
func dir(name string) ent        { return ent{name: name, typ: tar.TypeDir} }
func symlink(name, target string) ent {
	return ent{name: name, link: target, typ: tar.TypeSymlink}
}
func hardlink(name, target string) ent { return ent{name: name, link: target, typ: tar.TypeLink} }

// makeTar builds a tar; without end it has no end-of-archive marker.
func makeTar(t *testing.T, end bool, es ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, ModTime: time.Now(), Format: tar.FormatPAX}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.typ == tar.TypeChar {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if !end {
		tw.Flush()
		return buf.Bytes()
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// stagingLeft lists restore staging directories left in dir.
func stagingLeft(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), fspath.StagingPrefix) {
			left = append(left, e.Name())
		}
	}
	return left
}

// failAfter yields n bytes of r, then fails: the host's blob download
// breaking halfway. When failing is set it runs once before the first
// failure, so a test can hold the break until the agent has begun.
type failAfter struct {
	r       io.Reader
	n       int
	failing func()
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		if f.failing != nil {
			f.failing()
			f.failing = nil
		}
		return 0, errors.New("blob download failed")
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

func TestRestoreReplacesAtomically(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	parent := filepath.Join(a.Dir, "ws")
	target := filepath.Join(parent, "project")
	mustWrite(t, filepath.Join(target, "old.txt"), "old", 0o644)
	mustWrite(t, filepath.Join(target, "sub", "old2.txt"), "old2", 0o644)
	before := tree(t, target)

	var many []ent
	for i := 0; i < 50; i++ {
		many = append(many, file("f"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+"/"+string(rune('a'+i/26))+".txt", strings.Repeat("data", 1000)))
	}
	good := makeTar(t, true, append([]ent{dir("./"), file("new.txt", "new")}, many...)...)
	bigFile := makeTar(t, true, file("a.txt", "a"), file("big.bin", strings.Repeat("z", 1<<20)), file("z.txt", "z"))

	failures := []struct {
		name string
		body io.Reader
		kind error
	}{
		{"cut in the middle of a file", bytes.NewReader(bigFile[:len(bigFile)/2]), errdefs.ErrInvalidArgument},
		{"cut at an entry boundary (no end marker)", bytes.NewReader(makeTar(t, false, append([]ent{file("new.txt", "new")}, many...)...)), errdefs.ErrInvalidArgument},
		// The break waits until the agent has made its staging directory:
		// a client that fails before the agent has begun would leave
		// nothing to clean up, and the check below would prove nothing.
		{"upload breaks halfway", &failAfter{r: bytes.NewReader(good), n: len(good) / 2, failing: func() {
			// (This runs on the client's goroutine, so it must not call t.Fatal.)
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if m, _ := filepath.Glob(filepath.Join(parent, fspath.StagingPrefix+"*")); len(m) > 0 {
					return
				}
			}
		}}, nil},
		{"hostile entry after many good ones", bytes.NewReader(makeTar(t, true, append(many, file("../escape.txt", "x"))...)), errdefs.ErrInvalidArgument},
		{"garbage", strings.NewReader(strings.Repeat("not a tar ", 200)), errdefs.ErrInvalidArgument},
	}
	for _, f := range failures {
		_, err := c.WriteArchive(ctx, target, f.body, "")
		if err == nil {
			t.Fatalf("%s: restore succeeded", f.name)
		}
		if f.kind != nil && !errors.Is(err, f.kind) {
			t.Errorf("%s: error %v, want %v", f.name, err, f.kind)
		}
		// The agent may still be cleaning up after a cut connection.
		deadline := time.Now().Add(5 * time.Second)
		for len(stagingLeft(t, parent)) > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if left := stagingLeft(t, parent); len(left) > 0 {
			t.Errorf("%s: staging left behind: %q", f.name, left)
		}
		diffTrees(t, f.name+": old tree", tree(t, target), before)
		if _, err := os.Stat(filepath.Join(parent, "escape.txt")); err == nil {
			t.Fatalf("%s: an entry escaped", f.name)
		}
	}

	// A good archive replaces the tree completely: old files are gone.
	res, err := c.WriteArchive(ctx, target, bytes.NewReader(good), "")
	if err != nil {
		t.Fatal(err)
	}
	after := tree(t, target)
	if _, ok := after["old.txt"]; ok {
		t.Fatal("the old tree survived the restore")
	}
	if n, ok := after["new.txt"]; !ok || n.Size != 3 || res.Files != 51 {
		t.Fatalf("new tree: %+v, result %+v", n, res)
	}
	if left := stagingLeft(t, parent); len(left) > 0 {
		t.Fatalf("staging or old tree left behind: %q", left)
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		t.Fatalf("parent holds %d entries, want only the project", len(entries))
	}
}

func TestRestoreTargets(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	data := makeTar(t, true, dir("./"), file("hello.txt", "hi"))

	// A new directory whose parents do not exist yet.
	nested := filepath.Join(a.Dir, "new", "parents", "dir with space", "ü")
	if _, err := c.WriteArchive(ctx, nested, bytes.NewReader(data), "tester"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(nested, "hello.txt")); err != nil || string(b) != "hi" {
		t.Fatalf("restored file: %q %v", b, err)
	}
	// A failed restore into a new nested path leaves no parents behind.
	bad := filepath.Join(a.Dir, "gone", "too")
	if _, err := c.WriteArchive(ctx, bad, bytes.NewReader(makeTar(t, false, file("x", "y"))), ""); err == nil {
		t.Fatal("truncated archive restored")
	}
	if _, err := os.Stat(filepath.Join(a.Dir, "gone")); !os.IsNotExist(err) {
		t.Fatalf("a failed restore left the parents it made: %v", err)
	}
	// A relative path is relative to the default user's home.
	if _, err := c.WriteArchive(ctx, "rel/target", bytes.NewReader(data), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(a.Home, "rel/target/hello.txt")); err != nil {
		t.Fatal(err)
	}
	// A symlink to a directory: the directory is replaced, the link kept.
	real := filepath.Join(a.Dir, "real")
	mustWrite(t, filepath.Join(real, "old"), "old", 0o644)
	link := filepath.Join(a.Dir, "link")
	os.Symlink(real, link)
	if _, err := c.WriteArchive(ctx, link, bytes.NewReader(data), ""); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v", err)
	}
	if _, err := os.Stat(filepath.Join(real, "hello.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(real, "old")); !os.IsNotExist(err) {
		t.Fatal("old content survived")
	}
	// Refused targets.
	mustWrite(t, filepath.Join(a.Dir, "afile"), "x", 0o644)
	for _, p := range []string{"/", filepath.Join(a.Dir, "afile"), ""} {
		if _, err := c.WriteArchive(ctx, p, bytes.NewReader(data), ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("restore into %q: %v, want InvalidArgument", p, err)
		}
	}
	if _, err := c.WriteArchive(ctx, filepath.Join(a.Dir, "x"), bytes.NewReader(data), "nosuchuser"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown user: %v", err)
	}
}

// TestRestoreHostileArchives is checklist #1-2 for backups: a tampered
// blob tries to write or link outside the restored tree. A canary
// directory beside the target must be untouched, and each probe is run
// again with the protections off to show it detects the escape.
func TestRestoreHostileArchives(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: restores chown")
	}
	a, c := newClient(t)
	ctx := context.Background()
	parent := filepath.Join(a.Dir, "ws")
	target := filepath.Join(parent, "project")
	canary := filepath.Join(parent, "canary")
	secret := filepath.Join(canary, "secret")

	cases := []struct {
		name    string
		entries []ent
		control bool // the naive extractor escapes with this archive
	}{
		{"dot-dot name", []ent{file("../canary/pwned", "x")}, true},
		{"dot-dot inside", []ent{dir("a/"), file("a/../../canary/pwned", "x")}, true},
		{"absolute name", []ent{file(canary+"/pwned", "x")}, true},
		{"symlink then write through it", []ent{symlink("e", canary), file("e/pwned", "x")}, true},
		{"relative symlink then write", []ent{symlink("e", "../canary"), file("e/pwned", "x")}, true},
		{"symlink then overwrite target", []ent{symlink("s", secret), file("s", "overwritten")}, false},
		{"symlink then dir entry through it", []ent{symlink("e", canary), dir("e/newdir/")}, true},
		{"hard link outside (relative)", []ent{hardlink("h", "../canary/secret")}, true},
		{"hard link outside (absolute)", []ent{hardlink("h", secret)}, true},
		{"hard link through a symlinked dir", []ent{symlink("s", canary), hardlink("h", "s/secret")}, true},
		{"symlink parent of hard link name", []ent{file("f", "x"), symlink("s", canary), hardlink("s/pwned", "f")}, true},
		{"device node", []ent{{name: "null", typ: tar.TypeChar}}, false},
		{"dot-dot root", []ent{dir("../")}, false},
	}

	canaryState := func() map[string]node { return tree(t, canary) }
	// reset makes a fresh target and canary and returns the canary's state.
	reset := func() map[string]node {
		os.RemoveAll(parent)
		mustWrite(t, filepath.Join(target, "mine.txt"), "mine", 0o644)
		mustWrite(t, secret, "canary secret", 0o600)
		return canaryState()
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := reset()
			old := tree(t, target)
			data := makeTar(t, true, append([]ent{file("good.txt", "fine")}, tc.entries...)...)
			_, err := c.WriteArchive(ctx, target, bytes.NewReader(data), "")
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("hostile archive: %v, want InvalidArgument", err)
			}
			diffTrees(t, "canary", canaryState(), want)
			diffTrees(t, "target", tree(t, target), old)
			if left := stagingLeft(t, parent); len(left) > 0 {
				t.Fatalf("staging left: %q", left)
			}

			// os.Root alone (name and parent checks off) still
			// confines the escapes.
			want = reset()
			restore := agent.SetExtractConfinementForTest(true, false)
			_, err = c.WriteArchive(ctx, target, bytes.NewReader(data), "")
			restore()
			if tc.control && err == nil {
				t.Errorf("with only os.Root, the restore succeeded")
			}
			diffTrees(t, "canary with only os.Root", canaryState(), want)

			if !tc.control {
				return
			}
			// Negative control: the naive extractor escapes, and the
			// canary probe sees it.
			want = reset()
			restore = agent.SetExtractConfinementForTest(true, true)
			c.WriteArchive(ctx, target, bytes.NewReader(data), "")
			restore()
			got := canaryState()
			var st syscall.Stat_t
			syscall.Stat(secret, &st)
			_, pwned := os.Lstat(filepath.Join(canary, "pwned"))
			_, newdir := os.Lstat(filepath.Join(canary, "newdir"))
			if pwned != nil && newdir != nil && st.Nlink == 1 && !changed(got, want) {
				t.Fatal("negative control: the naive extractor did not escape; the probe cannot detect the attack")
			}
		})
	}
}

func changed(got, want map[string]node) bool {
	if len(got) != len(want) {
		return true
	}
	for k, v := range want {
		if got[k] != v {
			return true
		}
	}
	return false
}

// TestWriteArchiveSourceError: a source that fails mid-upload is reported
// as such, not as an agent failure.
func TestWriteArchiveSourceError(t *testing.T) {
	a, c := newClient(t)
	data := makeTar(t, true, file("a", strings.Repeat("x", 1<<20)))
	_, err := c.WriteArchive(context.Background(), filepath.Join(a.Dir, "t"), &failAfter{r: bytes.NewReader(data), n: 4096}, "")
	if err == nil || !strings.Contains(err.Error(), "blob download failed") {
		t.Fatalf("source error not surfaced: %v", err)
	}
}
