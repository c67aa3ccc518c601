//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-sh/berth/bench"
)

// TestBenchTask runs berth bench --task with two samples per scenario
// against the suite's daemon (no pool there, Docker skipped): every
// scenario gets its app to answer through the preview URL with the body
// only a complete node_modules computes, the phases come in order, and
// nothing of the run is left behind. Timings are logged, not asserted.
func TestBenchTask(t *testing.T) {
	ctx := context.Background()
	var out bytes.Buffer
	o := bench.Options{Task: true, N: 2, JSON: true, NoDocker: true, Instance: "standard-1", DataDir: dataDir, Logf: t.Logf}
	if err := bench.RunTask(ctx, d.c, o, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", out.String())
	var rep bench.TaskReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range rep.Scenarios {
		got[s.Name] = true
		if s.App == nil || s.App.N != 2 {
			t.Fatalf("%s: %+v", s.Name, s.App)
		}
		if !(s.Shell.Min > 0 && s.Shell.Max <= s.Deps.Max && s.Deps.Max <= s.App.Max) {
			t.Fatalf("%s: phases out of order: shell %+v deps %+v app %+v", s.Name, s.Shell, s.Deps, s.App)
		}
		if s.Name != bench.TaskZero && s.AppVsZero == nil {
			t.Fatalf("%s: no ratio to from zero", s.Name)
		}
	}
	for _, n := range []string{bench.TaskZero, bench.TaskSnapshot, bench.TaskWake} {
		if !got[n] {
			t.Fatalf("no %s scenario in %+v", n, rep.Scenarios)
		}
	}
	if got[bench.TaskPool] || !strings.Contains(strings.Join(rep.Notes, "\n"), "pool scenario skipped") {
		t.Fatalf("the suite's daemon keeps no pool; the report must say the pool scenario was skipped: %v", rep.Notes)
	}
	if rep.Workspace == nil || rep.Workspace.NodeFiles < 2000 {
		t.Fatalf("workspace %+v", rep.Workspace)
	}
	list, err := d.c.List(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if strings.HasPrefix(s.Name, "bench-") {
			t.Errorf("left behind: sandbox %s", s.Name)
		}
	}
	snaps, err := d.c.ListSnapshots(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if strings.HasPrefix(s.Name, "bench-task-") {
			t.Errorf("left behind: snapshot %s", s.Name)
		}
	}
}
