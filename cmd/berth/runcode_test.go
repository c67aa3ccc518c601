package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunCodeCLI(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed on this host")
	}
	c, _ := newDevCLI(t)
	out := t.TempDir()
	code := "class P:\n    def _repr_png_(self): return b'\\x89PNG-bytes'\nprint('hello')\ndisplay(P())\n6 * 7\n"
	rc, stdout, stderr := c.run(code, "run-code", "dev", "--lang", "python", "--out", out)
	if rc != 0 || stdout != "hello\n42\n" {
		t.Fatalf("rc %d stdout %q stderr %q", rc, stdout, stderr)
	}
	got, err := os.ReadFile(filepath.Join(out, "result-1.png"))
	if err != nil || string(got) != "\x89PNG-bytes" {
		t.Fatalf("saved png %q %v (stderr %q)", got, err, stderr)
	}
	rc, _, stderr = c.run("raise KeyError('k')", "run-code", "dev")
	if rc != 1 || !strings.Contains(stderr, "KeyError: 'k'") {
		t.Fatalf("error run: rc %d stderr %q", rc, stderr)
	}
}
