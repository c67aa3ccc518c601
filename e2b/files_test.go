package e2b

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/berth-sh/berth/e2b/envdpb/filesystem"
)

// Mode is the permission bits alone, as envd's (0755 → 493), for files and
// directories; only the permissions string shows the type.
func TestEntryModeIsPermissionBits(t *testing.T) {
	e := setup(t)
	c := e.connectClient(false, connect.WithProtoJSON())
	ctx := context.Background()
	d := filepath.Join(e.dir, "d")
	os.Mkdir(d, 0o755)
	os.Chmod(d, 0o755)
	os.WriteFile(filepath.Join(d, "f"), nil, 0o640)
	os.Chmod(filepath.Join(d, "f"), 0o640)
	st, err := c.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: d}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Msg.Entry.Mode != 0o755 || st.Msg.Entry.Permissions != "drwxr-xr-x" {
		t.Fatalf("dir: mode %d %q, want 493 drwxr-xr-x", st.Msg.Entry.Mode, st.Msg.Entry.Permissions)
	}
	ls, err := c.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: e.dir, Depth: 2}))
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ls.Msg.Entries {
		if en.Mode > 0o777 {
			t.Fatalf("%s: mode %d carries type bits", en.Path, en.Mode)
		}
	}
}

// Removing a missing path succeeds (envd's os.RemoveAll); watching a
// regular file is invalid_argument, a missing path not_found.
func TestRemoveMissingAndWatchAFile(t *testing.T) {
	e := setup(t)
	c := e.connectClient(false, connect.WithProtoJSON())
	// Bounded: a watch that was wrongly accepted would stream forever.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: filepath.Join(e.dir, "never")})); err != nil {
		t.Fatalf("remove a missing path: %v", err)
	}
	f := filepath.Join(e.dir, "plain.txt")
	os.WriteFile(f, []byte("x"), 0o644)
	st, err := c.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: f}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
	}
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("watchDir on a file: %v, want invalid_argument", err)
	}
	if _, err := c.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: f})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("createWatcher on a file: %v, want invalid_argument", err)
	}
	st, err = c.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: filepath.Join(e.dir, "none")}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
	}
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("watchDir on a missing path: %v, want not_found", err)
	}
}

func TestResolvePathAs(t *testing.T) {
	for _, tc := range [][3]string{
		{"root", "hello.txt", "/root/hello.txt"},
		{"root", "~", "/root"},
		{"root", "~/a/../b", "/root/b"},
		{"user", "hello.txt", "/home/user/hello.txt"},
		{"", "", "/home/user"},
		{"root", "/etc/x", "/etc/x"},
	} {
		if got := resolvePathAs(tc[0], tc[1]); got != tc[2] {
			t.Errorf("resolvePathAs(%q, %q) = %q, want %q", tc[0], tc[1], got, tc[2])
		}
	}
}
