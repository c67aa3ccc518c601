package local

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/store"
)

func TestChangedSince(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(sub, "f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nonexistent", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ctimeSlack)
	// As the daemon does: a change at real time t may carry a ctime up to
	// a clock tick earlier (coarse timestamps), hence the slack.
	t0 := time.Now().Add(-ctimeSlack)
	if got := changedSince(dir, t0); got != "" {
		t.Fatalf("unchanged tree reported %q changed", got)
	}
	// Control: every kind of change after t0 shows, including a mode-only
	// change whose mtime is put back.
	fi, _ := os.Stat(f)
	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(f, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got := changedSince(dir, t0); got != "a/b/f" {
		t.Fatalf("chmod: changedSince = %q, want a/b/f", got)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(f, &st); err == nil {
		t.Logf("ctime lag behind the wall clock at the chmod: %s", time.Until(time.Unix(0, st.Ctim.Nano())).Round(time.Microsecond))
	}
	if got := changedSince(filepath.Join(dir, "missing"), t0); got == "" {
		t.Fatal("a walk error must count as a change")
	}
}

func TestChainExtends(t *testing.T) {
	base := []store.Layer{{ID: "snap_a", SHA256: "sha256:1"}}
	if !chainExtends(append(append([]store.Layer(nil), base...), store.Layer{ID: "snap_b"}), base, "snap_b") {
		t.Fatal("base + snap_b rejected")
	}
	if chainExtends([]store.Layer{{ID: "snap_b"}}, base, "snap_b") {
		t.Fatal("a squashed chain (base missing) accepted")
	}
	if chainExtends([]store.Layer{{ID: "snap_x", SHA256: "sha256:1"}, {ID: "snap_b"}}, base, "snap_b") {
		t.Fatal("a different base accepted")
	}
}
