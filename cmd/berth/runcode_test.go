package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunCodeCLI(t *testing.T) {
	// A python context runs IPython: a python3 with ipykernel.
	const imp = "import ipykernel, jupyter_client"
	if exec.Command("python3", "-c", imp).Run() != nil {
		if exec.Command("/usr/bin/python3", "-c", imp).Run() != nil {
			t.Skip("no python3 with ipykernel and jupyter_client on this host")
		}
		t.Setenv("PATH", "/usr/bin:"+os.Getenv("PATH"))
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
