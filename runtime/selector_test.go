package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// fakeOCI is a runtime binary that records each command line in log as
// "<name> <command> <args…>" and answers state and list as a runtime
// would. It needs no root: the selector's choices are all it checks.
func fakeOCI(t *testing.T, dir, name, log string) *OCI {
	t.Helper()
	bin := filepath.Join(dir, name)
	script := `#!/bin/sh
shift 2 # --root ROOT
echo "` + name + ` $*" >> "` + log + `"
case "$1" in
state) printf '{"id":"%s","status":"running","pid":42}\n' "$2" ;;
list) printf '[{"id":"` + name + `-ctr","status":"running","pid":7}]\n' ;;
esac
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, name+"-state")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	return New(bin, root)
}

type selectorEnv struct {
	s   *Selector
	log string
}

func newSelectorEnv(t *testing.T, gvisor bool) *selectorEnv {
	dir := t.TempDir()
	e := &selectorEnv{log: filepath.Join(dir, "calls.log")}
	e.s = &Selector{Default: fakeOCI(t, dir, "runc", e.log), MarkerDir: filepath.Join(dir, "run", "gvisor"), CgroupRoot: "/berth-test"}
	if gvisor {
		e.s.GVisor = fakeOCI(t, dir, "runsc", e.log)
	}
	return e
}

// calls returns the command lines since the last call and forgets them.
func (e *selectorEnv) calls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(e.log)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	_ = os.Remove(e.log)
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "_"))
}

func TestSelectorRoutesByMarker(t *testing.T) {
	ctx := context.Background()
	e := newSelectorEnv(t, true)
	if err := e.s.Choose("g1", true); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Choose("r1", false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(e.s.MarkerDir, "g1"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("gvisor marker: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(e.s.MarkerDir, "r1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("runc container has a marker: %v", err)
	}
	for _, id := range []string{"g1", "r1"} {
		if err := e.s.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := e.s.Kill(ctx, id, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := e.s.Pause(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := e.s.Resume(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"runsc_start_g1", "runsc_kill_g1_15", "runsc_pause_g1", "runsc_resume_g1",
		"runc_start_r1", "runc_kill_r1_15", "runc_pause_r1", "runc_resume_r1"}
	if got := e.calls(t); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("commands:\n got %v\nwant %v", got, want)
	}
	if st, err := e.s.State(ctx, "g1"); err != nil || st.ID != "g1" || st.Pid != 42 {
		t.Fatalf("state: %+v %v", st, err)
	}
	if got := e.calls(t); len(got) != 1 || got[0] != "runsc_state_g1" {
		t.Fatalf("state went to %v", got)
	}
	// A restart of the sandbox without gVisor moves it back to runc.
	if err := e.s.Choose("g1", false); err != nil {
		t.Fatal(err)
	}
	if e.s.IsGVisor("g1") || e.s.Pick("g1") != e.s.Default {
		t.Fatal("g1 still picks runsc after choosing runc")
	}
}

func TestSelectorWithoutRunsc(t *testing.T) {
	e := newSelectorEnv(t, false)
	if err := e.s.Choose("g", true); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "runsc is not installed") {
		t.Fatalf("choosing gvisor without runsc: %v", err)
	}
	// A marker left from a host that had runsc does not route to nothing.
	if err := os.MkdirAll(e.s.MarkerDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.s.MarkerDir, "g"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if e.s.Pick("g") != e.s.Default || e.s.IsGVisor("g") {
		t.Fatal("without runsc every id is runc's")
	}
	if err := e.s.Each(func(r *OCI) error {
		if r != e.s.Default {
			t.Error("Each visited a runtime that is not installed")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestSelectorRejectsBadIDs(t *testing.T) {
	e := newSelectorEnv(t, true)
	for _, id := range []string{"", "..", "../x", "a/b", "a*"} {
		if err := e.s.Choose(id, true); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Choose(%q): %v, want invalid argument", id, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Dir(e.s.MarkerDir)); len(ents) != 0 {
		t.Fatalf("a bad id left files: %v", ents)
	}
}

// TestSelectorDeleteStrayRunscState: a crash between runsc's create and
// the marker leaves runsc state for an id that picks runc; Delete removes
// it from both; a runtime with no state for the id is not run at all.
func TestSelectorDeleteStrayRunscState(t *testing.T) {
	ctx := context.Background()
	e := newSelectorEnv(t, true)
	state := func(root, name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// No runtime keeps state for c: nothing is run (a start's clearing
	// of a crash's leftover container costs no process then).
	if err := e.s.Delete(ctx, "c", true); err != nil {
		t.Fatal(err)
	}
	if got := e.calls(t); len(got) != 0 {
		t.Fatalf("delete without any state: %v, want no runtime call", got)
	}
	// runc state (a dir named after the id) and stray runsc state: both asked.
	state(e.s.Default.Root, "c")
	state(e.s.GVisor.Root, "c_sandbox:c.state")
	if err := e.s.Delete(ctx, "c", false); err != nil {
		t.Fatal(err)
	}
	if got := e.calls(t); strings.Join(got, " ") != "runc_delete_c runsc_delete_c" {
		t.Fatalf("delete with stray runsc state: %v", got)
	}
	// Another id's state is not this one's ("c" is a prefix of "cd").
	state(e.s.Default.Root, "cd")
	if err := e.s.Delete(ctx, "cd", false); err != nil {
		t.Fatal(err)
	}
	if got := e.calls(t); strings.Join(got, " ") != "runc_delete_cd" {
		t.Fatalf("delete of cd: %v", got)
	}
	if err := e.s.Choose("g", true); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Delete(ctx, "g", false); err != nil {
		t.Fatal(err)
	}
	if got := e.calls(t); len(got) != 0 {
		t.Fatalf("delete of a gvisor container runsc has no state for: %v, want no call", got)
	}
	state(e.s.GVisor.Root, "g_sandbox:g.state")
	if err := e.s.Delete(ctx, "g", false); err != nil {
		t.Fatal(err)
	}
	if got := e.calls(t); strings.Join(got, " ") != "runsc_delete_g" {
		t.Fatalf("delete of a gvisor container: %v", got)
	}
}

func TestSelectorListsBoth(t *testing.T) {
	e := newSelectorEnv(t, true)
	list, err := e.s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range list {
		ids = append(ids, s.ID)
	}
	if strings.Join(ids, " ") != "runc-ctr runsc-ctr" {
		t.Fatalf("list: %v", ids)
	}
	// One runtime failing still lists the other, and says so.
	e.s.GVisor.Binary = filepath.Join(t.TempDir(), "missing")
	list, err = e.s.List(context.Background())
	if err == nil || len(list) != 1 || list[0].ID != "runc-ctr" {
		t.Fatalf("list with runsc broken: %+v %v", list, err)
	}
}

func TestSelectorInitPid(t *testing.T) {
	e := newSelectorEnv(t, false)
	bundle := t.TempDir()
	if _, err := e.s.InitPid("c", bundle); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no pid file: %v", err)
	}
	for content, want := range map[string]int{"1234\n": 1234, " 99 ": 99, "1": 0, "0": 0, "-5": 0, "x": 0, "": 0} {
		if err := os.WriteFile(filepath.Join(bundle, PidFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		pid, err := e.s.InitPid("c", bundle)
		if want == 0 && err == nil || want != 0 && (err != nil || pid != want) {
			t.Errorf("pid file %q: %d %v, want %d", content, pid, err, want)
		}
	}
}

// TestSelectorVerify: a gVisor container has no host-side posture to
// check; a runc one is checked, and fails closed without its pid.
func TestSelectorVerify(t *testing.T) {
	e := newSelectorEnv(t, true)
	if err := e.s.Choose("g", true); err != nil {
		t.Fatal(err)
	}
	bundle := t.TempDir() // no pid file
	if err := e.s.Verify(context.Background(), "g", bundle); err != nil {
		t.Fatalf("verify gvisor: %v", err)
	}
	if err := e.s.Verify(context.Background(), "r", bundle); err == nil || !strings.Contains(err.Error(), "verify posture") {
		t.Fatalf("verify runc without a pid file: %v", err)
	}
}

func TestSelectorCleanupMarkers(t *testing.T) {
	e := newSelectorEnv(t, true)
	for _, id := range []string{"keep", "gone"} {
		if err := e.s.Choose(id, true); err != nil {
			t.Fatal(err)
		}
	}
	e.s.cleanupMarkers(map[string]bool{"keep": true})
	if !e.s.IsGVisor("keep") || e.s.IsGVisor("gone") {
		t.Fatalf("after cleanup: keep=%v gone=%v", e.s.IsGVisor("keep"), e.s.IsGVisor("gone"))
	}
}

// TestSelectorWriteBundle: the bundle gets the selector's cgroupsPath and
// the marker follows the isolation asked for.
func TestSelectorWriteBundle(t *testing.T) {
	e := newSelectorEnv(t, true)
	dir := filepath.Join(t.TempDir(), "bundle")
	o := SpecOptions{ID: "w", RootfsPath: "/rootfs", Args: []string{"/agent"}}
	if err := e.s.WriteBundle(dir, true, o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Linux == nil || spec.Linux.CgroupsPath != "/berth-test/w" {
		t.Fatalf("cgroupsPath: %+v", spec.Linux)
	}
	if !e.s.IsGVisor("w") {
		t.Fatal("no gvisor marker after a gvisor bundle")
	}
	if err := e.s.WriteBundle(dir, false, o); err != nil {
		t.Fatal(err)
	}
	if e.s.IsGVisor("w") {
		t.Fatal("gvisor marker left after a runc bundle")
	}
	if err := (&Selector{Default: e.s.Default, MarkerDir: e.s.MarkerDir}).WriteBundle(t.TempDir(), true, o); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("gvisor bundle without runsc: %v", err)
	}
}
