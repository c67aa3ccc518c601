package weaken_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultBuildHoldsNoSwitches builds the daemon as a release does (no
// berthtest tag) and looks through its symbol table and bytes for the
// weaken and failpoint code and for the variables that drive them. The
// negative control builds it with the tag and must find all of them, so the
// search itself is shown to work.
func TestDefaultBuildHoldsNoSwitches(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/berth twice; skipped with -short")
	}
	const mod = "github.com/berth-sh/berth/internal/"
	marks := []struct {
		what, needle string
		symbol       bool
	}{
		{"weaken symbols", mod + "weaken.", true},
		{"failpoint symbols", mod + "failpoint.", true},
		{"weaken variable", "BERTH_TEST_WEAKEN", false},
		{"failpoint variable", "BERTH_FAILPOINTS", false},
	}
	goBin := goCommand(t)
	for _, c := range buildVariants(t, "./cmd/berth", nil) {
		bin := c.bin
		nm, err := exec.Command(goBin, "tool", "nm", bin).Output()
		if err != nil {
			t.Fatalf("go tool nm %s: %v", bin, err)
		}
		raw, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range marks {
			hay := raw
			if m.symbol {
				hay = nm
			}
			if got := bytes.Contains(hay, []byte(m.needle)); got != c.want {
				t.Errorf("%s build: %s (%q) present = %v, want %v", c.name, m.what, m.needle, got, c.want)
			}
		}
	}
}

// TestDefaultAgentHasNoTestFlags: berth-agent built as a release does has
// no --no-fd-check or --no-log-cap (a sandbox's init that can be told to
// skip its descriptor check is a weakness even unused). Negative control:
// the berthtest build has both, so the search is shown to work.
func TestDefaultAgentHasNoTestFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/berth-agent twice; skipped with -short")
	}
	for _, c := range buildVariants(t, "./cmd/berth-agent", []string{"CGO_ENABLED=0"}) {
		bin := c.bin
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, flag := range []string{"no-fd-check", "no-log-cap"} {
			if got := bytes.Contains(data, []byte(flag)); got != c.want {
				t.Errorf("%s build: holds %q = %v, want %v", c.name, flag, got, c.want)
			}
		}
	}
}

// variant is one build of a main package: the default (release) build,
// or the berthtest build, which must hold what the default must not.
type variant struct {
	name string
	bin  string
	want bool // the test switches should be in it
}

func goCommand(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build berth's binaries with")
	}
	return goBin
}

// buildVariants builds pkg (relative to the module root) without and with
// the berthtest tag, with env added to the build's environment. No
// -trimpath: the builds then reuse the packages go test has just
// compiled, and what the tests look for does not depend on it.
func buildVariants(t *testing.T, pkg string, env []string) []variant {
	t.Helper()
	goBin := goCommand(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var out []variant
	for _, v := range []struct {
		name string
		tags []string
		want bool
	}{
		{"default", nil, false},
		{"berthtest", []string{"-tags", "berthtest"}, true},
	} {
		bin := filepath.Join(dir, filepath.Base(pkg)+"-"+v.name)
		args := append([]string{"build"}, v.tags...)
		build := exec.Command(goBin, append(args, "-o", bin, pkg)...)
		build.Dir = root
		build.Env = append(os.Environ(), env...)
		if o, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(build.Args[1:], " "), err, o)
		}
		out = append(out, variant{name: v.name, bin: bin, want: v.want})
	}
	return out
}
