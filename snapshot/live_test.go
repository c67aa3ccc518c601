package snapshot

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCaptureLiveReadsSameBytes: reading unchanged files from the live
// upper (CaptureOptions.Live) writes exactly the bytes of a capture of the
// frozen copy alone; a live tree whose files are other inodes (a copy with
// one changed file), or whose files changed after LiveBefore, is never
// read from.
func TestCaptureLiveReadsSameBytes(t *testing.T) {
	dir := t.TempDir()
	frozen := filepath.Join(dir, "frozen")
	for i := 0; i < 20; i++ {
		mustWrite(t, filepath.Join(frozen, "pkg", "f"+strings.Repeat("x", i%3), "m"+string(rune('a'+i))+".js"), strings.Repeat("module.exports = 1;\n", 10*i+1), 0o644)
	}
	mustWrite(t, filepath.Join(frozen, "empty"), "", 0o600)
	must(t, os.Symlink("../etc/passwd", filepath.Join(frozen, "pkg", "link")))
	want, _ := capture(t, []string{frozen}, CaptureOptions{})

	// The same inodes, unchanged since before LiveBefore: read live.
	got, st := capture(t, []string{frozen}, CaptureOptions{Live: frozen, LiveBefore: time.Now().Add(time.Hour)})
	if !bytes.Equal(got, want) {
		t.Fatal("a capture reading the live upper wrote different bytes")
	}
	if st.LiveFiles != 20 {
		t.Fatalf("read %d files from the live upper, want the 20 non-empty regular files", st.LiveFiles)
	}

	// Control: changed after LiveBefore, so nothing is read live.
	got, st = capture(t, []string{frozen}, CaptureOptions{Live: frozen, LiveBefore: time.Now().Add(-time.Hour)})
	if !bytes.Equal(got, want) || st.LiveFiles != 0 {
		t.Fatalf("files newer than LiveBefore: %d read live, same bytes %v", st.LiveFiles, bytes.Equal(got, want))
	}

	// A live tree of other inodes with a changed file (what a sandbox
	// could make of its live upper after the copy): never read.
	live := filepath.Join(dir, "live")
	if out, err := exec.Command("cp", "-a", frozen, live).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	mustWrite(t, filepath.Join(live, "pkg", "f", "ma.js"), "module.exports = 2;\n", 0o644)
	got, st = capture(t, []string{frozen}, CaptureOptions{Live: live, LiveBefore: time.Now().Add(time.Hour)})
	if !bytes.Equal(got, want) || st.LiveFiles != 0 {
		t.Fatalf("other inodes: %d read live, same bytes %v", st.LiveFiles, bytes.Equal(got, want))
	}
	// A live path through a symlink is not resolved.
	must(t, os.Mkdir(filepath.Join(dir, "live2"), 0o755))
	must(t, os.Symlink(filepath.Join(frozen, "pkg"), filepath.Join(dir, "live2", "pkg")))
	got, st = capture(t, []string{frozen}, CaptureOptions{Live: filepath.Join(dir, "live2"), LiveBefore: time.Now().Add(time.Hour)})
	if !bytes.Equal(got, want) || st.LiveFiles != 0 {
		t.Fatalf("symlinked live dir: %d read live, same bytes %v", st.LiveFiles, bytes.Equal(got, want))
	}
}
