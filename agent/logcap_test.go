package agent_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/agent"
)

// TestCappedLogFlood: a flood of log lines (what a sandbox user causes with
// sudo) never takes the file past its cap, the newest lines survive a
// rotation, and a marker says the log was rotated (issue 12 C). The
// negative control writes the same flood to the bare file.
func TestCappedLogFlood(t *testing.T) {
	const max = 64 << 10
	line := strings.Repeat("x", 300) + "\n"
	flood := func(w interface{ Write([]byte) (int, error) }, f *os.File) int64 {
		var peak int64
		for i := 0; i < 5000; i++ {
			if _, err := w.Write([]byte(line)); err != nil {
				t.Fatal(err)
			}
			if fi, _ := f.Stat(); fi.Size() > peak {
				peak = fi.Size()
			}
		}
		w.Write([]byte("the last line\n"))
		return peak
	}
	open := func(name string) *os.File {
		f, err := os.OpenFile(filepath.Join(t.TempDir(), name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		f.Write([]byte("an earlier run's line\n"))
		return f
	}

	f := open("agent.log")
	peak := flood(agent.NewCappedLog(f, max), f)
	if peak > max {
		t.Fatalf("capped log reached %d bytes, cap %d", peak, max)
	}
	b, _ := os.ReadFile(f.Name())
	if !bytes.HasSuffix(b, []byte(line+"the last line\n")) || !bytes.Contains(b, []byte("rotated in place")) {
		t.Fatalf("after the flood the log (%d bytes) lacks the newest lines or the marker: %.200q", len(b), b)
	}
	if n := bytes.Count(b, []byte(line)); n < (max/8)/len(line)-1 {
		t.Fatalf("only %d lines kept across the rotation", n)
	}

	// One line larger than the cap is cut, not written whole.
	big := strings.Repeat("y", 4*max)
	agent.NewCappedLog(f, max).Write([]byte(big))
	if fi, _ := f.Stat(); fi.Size() > max {
		t.Fatalf("a %d-byte line took the log to %d bytes", len(big), fi.Size())
	}

	// Negative control: the same flood into the file itself.
	raw := open("raw.log")
	if peak := flood(raw, raw); peak <= max {
		t.Fatalf("control: an uncapped flood stayed at %d bytes; the test proves nothing", peak)
	}
}
