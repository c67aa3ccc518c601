package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/internal/errdefs"
)

// node is what a round trip must keep of one tree entry.
type node struct {
	Type     string
	Mode     uint32 // permission and special bits
	UID, GID uint32
	Size     int64
	Sum      string
	Target   string
	Mtime    int64  // ns
	LinkOf   string // for a multiply-linked file: the first path of its inode
}

// tree describes every entry below root (root itself as "."), without
// following symlinks.
func tree(t *testing.T, root string) map[string]node {
	t.Helper()
	out := map[string]node{}
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := node{Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid, Mtime: st.Mtim.Nano()}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			n.Type = "dir"
		case unix.S_IFREG:
			n.Type = "file"
			n.Size = st.Size
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			n.Sum = hex.EncodeToString(sum[:8])
			if st.Nlink > 1 {
				if first, ok := inodes[st.Ino]; ok {
					n.LinkOf = first
				} else {
					inodes[st.Ino] = rel
				}
			}
		case unix.S_IFLNK:
			n.Type = "symlink"
			n.Target, _ = os.Readlink(p)
		default:
			n.Type = "other"
		}
		out[rel] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffTrees(t *testing.T, what string, got, want map[string]node) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: %q missing", what, k)
		} else if g != w {
			t.Errorf("%s: %q\n got  %+v\n want %+v", what, k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %q", what, k)
		}
	}
}

func mustWrite(t *testing.T, p string, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// readAll reads a whole archive through the client.
func readArchive(t *testing.T, c *agentclient.Client, dir string, opts agentclient.ArchiveOptions) []byte {
	t.Helper()
	rc, err := c.ReadArchive(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("ReadArchive %s: %v", dir, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading archive of %s: %v", dir, err)
	}
	return data
}

func tarHeaders(t *testing.T, data []byte) []*tar.Header {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	var hs []*tar.Header
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hs
		}
		if err != nil {
			t.Fatalf("parsing archive: %v", err)
		}
		hs = append(hs, h)
	}
}

// buildSource makes the round-trip tree in dir, returns the path of a
// marker file outside it.
func buildSource(t *testing.T, base, src string) string {
	t.Helper()
	outside := filepath.Join(base, "outside")
	mustWrite(t, filepath.Join(outside, "secret.txt"), "OUTSIDE-MARKER-7f3a9c", 0o644)
	long := strings.Repeat("ü", 100) // 200 bytes: beyond ustar's 100
	files := map[string]os.FileMode{
		"résumé.txt":                       0o644,
		"日本語/ファイル":                         0o600,
		"with space/file name.txt":         0o640,
		"new\nline":                        0o644,
		"tab\tand 'quote\" $x":             0o644,
		"bin/run.sh":                       0o755,
		"bin/suid":                         os.ModeSetuid | 0o755,
		long + "/" + long + "/" + long:     0o644,
		"deep/a/b/c/d/e/f/g/h/i/j/leaf.md": 0o644,
		"owned-by-other":                   0o644,
		"empty-file":                       0o644,
	}
	for name, mode := range files {
		content := "content of " + name
		if name == "empty-file" {
			content = ""
		}
		mustWrite(t, filepath.Join(src, name), content, mode)
	}
	if err := os.Chown(filepath.Join(src, "owned-by-other"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"empty", "private", "日本語/空"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(src, "private"), 0o700)
	os.Chmod(filepath.Join(src, "bin"), 0o750)
	os.Chmod(src, 0o751)
	for link, target := range map[string]string{
		"root-link":   "/",
		"out-link":    outside,
		"rel-link":    "日本語/ファイル",
		"dangling":    "does/not/exist",
		"日本語/up-link": "../résumé.txt",
	} {
		if err := os.Symlink(target, filepath.Join(src, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(src, "résumé.txt"), filepath.Join(src, "with space/hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Sub-second mtimes, set deepest first so parents keep theirs.
	var paths []string
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		paths = append(paths, p)
		return nil
	})
	for i := len(paths) - 1; i >= 0; i-- {
		ts := unix.NsecToTimespec(time.Date(2021, 3, 4, 5, 6, 7, 123456789+i, time.UTC).UnixNano())
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(outside, "secret.txt")
}

func TestArchiveRoundTrip(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	src := filepath.Join(a.Dir, "src")
	marker := buildSource(t, a.Dir, src)
	want := tree(t, src)
	delete(want, "fifo") // sockets, FIFOs and devices are skipped

	data := readArchive(t, c, src, agentclient.ArchiveOptions{})
	hs := tarHeaders(t, data)
	byName := map[string]*tar.Header{}
	for _, h := range hs {
		byName[h.Name] = h
	}
	if hs[0].Name != "./" || hs[0].Typeflag != tar.TypeDir {
		t.Fatalf("first entry is %q, want the root ./", hs[0].Name)
	}
	if h := byName["root-link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/" {
		t.Fatalf("root-link entry: %+v", h)
	}
	if h := byName["with space/hardlink"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "résumé.txt" {
		t.Fatalf("hard link entry: %+v", h)
	}
	if byName["fifo"] != nil {
		t.Fatal("a FIFO was archived")
	}
	for _, h := range hs {
		if strings.HasPrefix(h.Name, "root-link/") || strings.HasPrefix(h.Name, "out-link/") {
			t.Fatalf("a symlink was followed: %q", h.Name)
		}
	}
	// Content from outside the tree, reachable only through the links,
	// is not in the archive; the probe does find it when it is there.
	secret, _ := os.ReadFile(marker)
	if bytes.Contains(data, secret) {
		t.Fatal("content outside the directory leaked into the archive through a symlink")
	}
	if ctl := readArchive(t, c, filepath.Dir(marker), agentclient.ArchiveOptions{}); !bytes.Contains(ctl, secret) {
		t.Fatal("negative control: the marker probe does not see the marker in its own directory's archive")
	}

	// Restore as is (preserving owners): identical trees.
	dst := filepath.Join(a.Dir, "restored", "exact")
	res, err := c.WriteArchiveWith(ctx, dst, bytes.NewReader(data), agentclient.WriteArchiveOptions{PreserveOwner: true})
	if err != nil {
		t.Fatal(err)
	}
	diffTrees(t, "preserve owners", tree(t, dst), want)
	var files, dirs int64
	for _, n := range want {
		if n.Type == "dir" {
			dirs++
		} else {
			files++
		}
	}
	if res.Files != files || res.Dirs != dirs || res.Bytes <= 0 {
		t.Errorf("result %+v, want %d files and %d dirs", res, files, dirs)
	}

	// Restore as tester: everything is tester's, setuid is dropped.
	dst2 := filepath.Join(a.Dir, "restored", "as-tester")
	if _, err := c.WriteArchive(ctx, dst2, bytes.NewReader(data), "tester"); err != nil {
		t.Fatal(err)
	}
	want2 := map[string]node{}
	for k, n := range want {
		n.UID, n.GID = 1000, 1000
		n.Mode &^= 0o6000
		want2[k] = n
	}
	diffTrees(t, "as tester", tree(t, dst2), want2)

	// The default user (root here) when none is named.
	dst3 := filepath.Join(a.Dir, "restored", "default")
	if _, err := c.WriteArchive(ctx, dst3, bytes.NewReader(data), ""); err != nil {
		t.Fatal(err)
	}
	if n := tree(t, dst3)["owned-by-other"]; n.UID != 0 || n.GID != 0 {
		t.Fatalf("default owner: %+v", n)
	}
}

func TestArchiveExcludeAndGitignore(t *testing.T) {
	a, c := newClient(t)
	src := filepath.Join(a.Dir, "proj")
	for _, f := range []string{
		"main.go", "app.log", "README.md",
		"node_modules/x/index.js", "web/node_modules/y.js",
		"build/out.bin", "src/build", "src/a.go", "src/a.tmp", "src/keep.tmp",
		"docs/guide.md", "docs/sub/deep.md", "logs/today/1.txt", "secret.env",
		"vendor/.gitignore", "vendor/lib.go", "vendor/local.txt", "vendor/sub/local.txt",
	} {
		mustWrite(t, filepath.Join(src, f), f, 0o644)
	}
	mustWrite(t, filepath.Join(src, ".gitignore"), "# build output\nbuild/\n*.tmp\n!keep.tmp\n/secret.env\nlogs/**\n", 0o644)
	mustWrite(t, filepath.Join(src, "vendor/.gitignore"), "/local.txt\n", 0o644)

	all := []string{".gitignore", "README.md", "app.log", "build", "build/out.bin", "docs", "docs/guide.md",
		"docs/sub", "docs/sub/deep.md", "logs", "logs/today", "logs/today/1.txt", "main.go", "node_modules",
		"node_modules/x", "node_modules/x/index.js", "secret.env", "src", "src/a.go", "src/a.tmp", "src/build",
		"src/keep.tmp", "vendor", "vendor/.gitignore", "vendor/lib.go", "vendor/local.txt", "vendor/sub",
		"vendor/sub/local.txt", "web", "web/node_modules", "web/node_modules/y.js"}
	without := func(drop ...string) []string {
		var out []string
	next:
		for _, n := range all {
			for _, d := range drop {
				if n == d || strings.HasPrefix(n, d+"/") {
					continue next
				}
			}
			out = append(out, n)
		}
		return out
	}
	cases := []struct {
		name string
		opts agentclient.ArchiveOptions
		want []string
	}{
		{"everything", agentclient.ArchiveOptions{}, all},
		{"basename globs", agentclient.ArchiveOptions{Exclude: []string{"*.log", "node_modules"}},
			without("app.log", "node_modules", "web/node_modules")},
		{"anchored and double star", agentclient.ArchiveOptions{Exclude: []string{"/build", "docs/**/*.md", "src/*.go"}},
			without("build", "docs/sub/deep.md", "docs/guide.md", "src/a.go")},
		{"dir only", agentclient.ArchiveOptions{Exclude: []string{"build/"}}, without("build")},
		{"gitignore", agentclient.ArchiveOptions{Gitignore: true},
			without("build", "src/a.tmp", "secret.env", "logs/today", "vendor/local.txt")},
		{"gitignore and excludes", agentclient.ArchiveOptions{Gitignore: true, Exclude: []string{"node_modules", "*.md"}},
			without("build", "src/a.tmp", "secret.env", "logs/today", "vendor/local.txt", "node_modules",
				"web/node_modules", "README.md", "docs/guide.md", "docs/sub/deep.md")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, h := range tarHeaders(t, readArchive(t, c, src, tc.opts)) {
				if n := strings.TrimSuffix(h.Name, "/"); n != "." {
					got = append(got, n)
				}
			}
			sort.Strings(got)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("entries\n got  %q\n want %q", got, tc.want)
			}
		})
	}
}

func TestArchiveErrors(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	mustWrite(t, filepath.Join(a.Dir, "file"), "x", 0o644)
	mustWrite(t, filepath.Join(a.Home, "work", "in-home.txt"), "home", 0o644)
	checks := []struct {
		dir  string
		opts agentclient.ArchiveOptions
		kind error
	}{
		{filepath.Join(a.Dir, "missing"), agentclient.ArchiveOptions{}, errdefs.ErrNotFound},
		{filepath.Join(a.Dir, "file"), agentclient.ArchiveOptions{}, errdefs.ErrInvalidArgument},
		{a.Dir, agentclient.ArchiveOptions{Exclude: []string{"[unclosed"}}, errdefs.ErrInvalidArgument},
		{"", agentclient.ArchiveOptions{}, errdefs.ErrInvalidArgument},
	}
	for _, ck := range checks {
		rc, err := c.ReadArchive(ctx, ck.dir, ck.opts)
		if err == nil {
			rc.Close()
		}
		if !errors.Is(err, ck.kind) {
			t.Errorf("ReadArchive(%q, %+v) = %v, want %v", ck.dir, ck.opts, err, ck.kind)
		}
	}
	// A relative path is relative to the default user's home.
	hs := tarHeaders(t, readArchive(t, c, "work", agentclient.ArchiveOptions{}))
	if len(hs) != 2 || hs[1].Name != "in-home.txt" {
		t.Fatalf("relative path: %d entries", len(hs))
	}
}

// TestArchiveCutStreamIsAnError makes the agent fail after the stream has
// started (a file shrinks while it is read) and checks that the host sees
// a cut stream, never a short archive that parses as complete.
func TestArchiveCutStreamIsAnError(t *testing.T) {
	a, c := newClient(t)
	src := filepath.Join(a.Dir, "shrinking")
	big := filepath.Join(src, "big.bin")
	mustWrite(t, filepath.Join(src, "a-first.txt"), "first", 0o644)
	if err := os.WriteFile(big, bytes.Repeat([]byte("0123456789abcdef"), 4<<20), 0o644); err != nil { // 64 MiB
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(src, "z-last.txt"), "last", 0o644)

	read := func(shrink bool) ([]string, error) {
		rc, err := c.ReadArchive(context.Background(), src, agentclient.ArchiveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		tr := tar.NewReader(rc)
		var names []string
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return names, nil
			}
			if err != nil {
				return names, err
			}
			names = append(names, h.Name)
			if h.Name == "big.bin" {
				// Take 1 MiB, far less than the file, so the agent is
				// still reading it when it shrinks.
				if _, err := io.CopyN(io.Discard, tr, 1<<20); err != nil {
					return names, err
				}
				if shrink {
					if err := os.Truncate(big, 2<<20); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := io.Copy(io.Discard, tr); err != nil {
				return names, err
			}
		}
	}
	// Control: unchanged, the stream reads to its end marker.
	names, err := read(false)
	if err != nil || len(names) != 4 || names[3] != "z-last.txt" {
		t.Fatalf("control read: %q %v", names, err)
	}
	names, err = read(true)
	if err == nil {
		t.Fatalf("a stream cut by an agent error parsed as a complete archive: %q", names)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("cut stream error %v: want io.ErrUnexpectedEOF and Unavailable", err)
	}
	for _, n := range names {
		if n == "z-last.txt" {
			t.Fatal("entries after the failure were sent")
		}
	}
}

// TestArchiveGitignoreFromWorkTreeRoot (issue 12 item 11): backing up a
// subdirectory of a git work tree applies the .gitignore files above it
// up to the root (the directory holding .git) and .git/info/exclude, as
// git does: patterns relative to their own directory, deeper files
// first, negation; and nothing inside an ignored directory.
func TestArchiveGitignoreFromWorkTreeRoot(t *testing.T) {
	a, c := newClient(t)
	repo := filepath.Join(a.Dir, "repo")
	for _, f := range []string{
		"sub/a.go", "sub/a.log", "sub/keep.log", "sub/build/out.bin", "sub/x/build/o", "sub/top.txt",
		"sub/secret.txt", "sub/deep/d.log", "sub/deep/d.go", "top.txt", "mid/m.txt", ".git/HEAD",
	} {
		mustWrite(t, filepath.Join(repo, f), f, 0o644)
	}
	mustWrite(t, filepath.Join(repo, ".gitignore"), "*.log\nsub/build/\n/top.txt\n", 0o644)
	mustWrite(t, filepath.Join(repo, ".git/info/exclude"), "secret*\n", 0o644)
	mustWrite(t, filepath.Join(repo, "sub/.gitignore"), "!keep.log\n", 0o644)
	mustWrite(t, filepath.Join(repo, "sub/deep/.gitignore"), "!*.log\n", 0o644)
	names := func(dir string) []string {
		var got []string
		for _, h := range tarHeaders(t, readArchive(t, c, dir, agentclient.ArchiveOptions{Gitignore: true})) {
			if n := strings.TrimSuffix(h.Name, "/"); n != "." {
				got = append(got, n)
			}
		}
		sort.Strings(got)
		return got
	}
	want := []string{".gitignore", "a.go", "deep", "deep/.gitignore", "deep/d.go", "deep/d.log", "keep.log",
		"top.txt", "x", "x/build", "x/build/o"}
	if got := names(filepath.Join(repo, "sub")); !reflect.DeepEqual(got, want) {
		t.Fatalf("backup of sub/\n got  %q\n want %q", got, want)
	}
	// The same rules from deeper down.
	if got := names(filepath.Join(repo, "sub/deep")); !reflect.DeepEqual(got, []string{".gitignore", "d.go", "d.log"}) {
		t.Fatalf("backup of sub/deep: %q", got)
	}
	// An ignored directory holds nothing git would keep.
	if got := names(filepath.Join(repo, "sub/build")); len(got) != 0 {
		t.Fatalf("backup of the ignored sub/build: %q", got)
	}
	// The root itself: its info/exclude applies too.
	if got := names(repo); strings.Contains(strings.Join(got, " "), "secret") || !strings.Contains(strings.Join(got, " "), "sub/keep.log") {
		t.Fatalf("backup of the root: %q", got)
	}
	// Without gitignore everything is there.
	if n := len(tarHeaders(t, readArchive(t, c, filepath.Join(repo, "sub"), agentclient.ArchiveOptions{}))); n != 16 {
		t.Fatalf("plain backup of sub/ has %d entries, want 16", n)
	}
}
