package bench

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// untar unpacks a workspace tarball into dir and counts its regular files
// by top directory.
func untar(t *testing.T, tb []byte, dir string) map[string]int {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tb))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	counts := map[string]int{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(tarTime) || h.Uid != 0 || h.Uname != "" {
			t.Fatalf("%s: header not fixed: %v %d %q", h.Name, h.ModTime, h.Uid, h.Uname)
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			top, _, _ := strings.Cut(h.Name, "/")
			if !strings.Contains(h.Name, "/") {
				top = "."
			}
			counts[top]++
			b, _ := io.ReadAll(tr)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: unexpected type %c", h.Name, h.Typeflag)
		}
	}
	return counts
}

// TestWorkspaceDeterministicAndSized: the same spec gives the same bytes,
// another seed others, and the tarball holds what the report says: a few
// thousand files in node_modules, the venv's packages, the app.
func TestWorkspaceDeterministicAndSized(t *testing.T) {
	a, err := GenerateWorkspace(WorkspaceSpec{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := GenerateWorkspace(DefaultWorkspace)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest || !bytes.Equal(a.Tarball, b.Tarball) || a.ServerBody != b.ServerBody {
		t.Fatalf("two generations of the default spec differ: %s vs %s", a.Digest, b.Digest)
	}
	s2 := DefaultWorkspace
	s2.Seed = 2
	c, err := GenerateWorkspace(s2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest == a.Digest {
		t.Fatal("another seed gave the same tarball")
	}
	d := DefaultWorkspace
	if a.NodeFiles != d.NodePackages*d.FilesPerPackage || a.PyFiles != d.PyPackages*(d.PyModules+5) || a.AppFiles != 2 {
		t.Fatalf("counts %d/%d/%d", a.NodeFiles, a.PyFiles, a.AppFiles)
	}
	if a.NodeFiles < 2000 || a.NodeFiles > 10000 || a.Bytes < 5e6 || a.Bytes > 40e6 {
		t.Fatalf("not a few thousand files of realistic size: %d files, %d bytes", a.NodeFiles, a.Bytes)
	}
	counts := untar(t, a.Tarball, t.TempDir())
	if counts["node_modules"] != a.NodeFiles || counts["pysite"] != a.PyFiles || counts["."] != a.AppFiles {
		t.Fatalf("tarball holds %v, the report says %d/%d/%d", counts, a.NodeFiles, a.PyFiles, a.AppFiles)
	}
	if a.Modules < d.Roots*2 || a.Modules > d.NodePackages*4 {
		t.Fatalf("the server loads %d modules", a.Modules)
	}
	t.Logf("default workspace: %d files, %.1f MB, tarball %.1f MB, server loads %d modules",
		a.Files(), float64(a.Bytes)/1e6, float64(len(a.Tarball))/1e6, a.Modules)
	if _, err := GenerateWorkspace(WorkspaceSpec{FilesPerPackage: 3}); err == nil {
		t.Fatal("files per package 3 must be refused")
	}
}

// TestWorkspaceRuns runs the generated dev server with the host's node
// and imports the venv's packages with the host's python3: their answers
// are what the benchmark waits for. Removing one lib file makes the
// server fail (negative control: the body proves a complete tree).
func TestWorkspaceRuns(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node on this host")
	}
	spec := WorkspaceSpec{NodePackages: 40, FilesPerPackage: 8, PyPackages: 4, PyModules: 3, Roots: 4, Seed: 7}
	w, err := GenerateWorkspace(spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	untar(t, w.Tarball, dir)
	body, err := runServer(t, dir)
	if err != nil || body != w.ServerBody {
		t.Fatalf("dev server answered %q %v, want %q", body, err, w.ServerBody)
	}
	if _, err := exec.LookPath("python3"); err == nil {
		var sum []string
		for _, p := range w.PyImports {
			sum = append(sum, p+".VALUE")
		}
		cmd := exec.Command("python3", "-B", "-c", fmt.Sprintf("import %s; print(%s)", strings.Join(w.PyImports, ", "), strings.Join(sum, " + ")))
		cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(dir, "pysite"))
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != w.PyValue {
			t.Fatalf("python imports: %q %v, want %s", out, err, w.PyValue)
		}
	}
	// Negative control: a missing module of a package the server loads.
	var victim string
	filepath.WalkDir(filepath.Join(dir, "node_modules"), func(p string, _ os.DirEntry, _ error) error {
		if victim == "" && strings.HasSuffix(p, "/lib/f00.js") {
			victim = p
		}
		return nil
	})
	os.Remove(victim)
	if body, err := runServer(t, dir); err == nil && body == w.ServerBody {
		t.Fatalf("the server answered the full body without %s", victim)
	}
}

// runServer starts node server.js in dir on a free port and returns its
// first answer, or an error when it exits or does not answer in 10 s.
func runServer(t *testing.T, dir string) (string, error) {
	port, err := freeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "server.js")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		select {
		case err := <-exited:
			exited <- err
			return "", fmt.Errorf("server exited: %v: %s", err, stderr.String())
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(b), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", fmt.Errorf("no answer: %s", stderr.String())
}

// TestTaskReportMath: phases summarize per scenario, ratios are p50 over
// the from-zero p50 of the same engine, the target is met at ≤ 1/5 and
// only for berth's snapshot and pool, and the pool's saving is the p50
// difference per phase.
func TestTaskReportMath(t *testing.T) {
	samples := func(shell, deps, app []float64) []TaskSample {
		var s []TaskSample
		for i := range app {
			s = append(s, TaskSample{Shell: shell[i], Deps: deps[i], App: app[i]})
		}
		return s
	}
	r := &TaskReport{
		Scenarios: []TaskScenario{
			{Name: TaskZero, samples: samples([]float64{100, 120, 110}, []float64{900, 1000, 950}, []float64{1900, 2100, 2000})},
			{Name: TaskSnapshot, samples: samples([]float64{300, 90, 95}, []float64{350, 120, 125}, []float64{800, 390, 400})},
			{Name: TaskWake, samples: samples([]float64{150, 160, 170}, []float64{200, 210, 220}, []float64{600, 610, 620})},
			{Name: TaskPool, samples: samples([]float64{20, 25, 30}, []float64{800, 850, 900}, []float64{1500, 1600, 1700})},
		},
		Docker: []TaskScenario{
			{Name: TaskZero, Label: "docker: run", samples: samples([]float64{400}, []float64{1400}, []float64{4000})},
			{Name: TaskSnapshot, Label: "docker: commit", samples: samples([]float64{400}, []float64{500}, []float64{100})},
		},
	}
	r.finish()
	zero, snap, wake, pool := &r.Scenarios[0], &r.Scenarios[1], &r.Scenarios[2], &r.Scenarios[3]
	if zero.App.P50 != 2000 || zero.Shell.P50 != 110 || zero.Deps.N != 3 || zero.App.Max != 2100 {
		t.Fatalf("zero %+v %+v", zero.App, zero.Shell)
	}
	if *snap.AppVsZero != 0.2 || snap.Met == nil || !*snap.Met {
		t.Fatalf("snapshot at exactly 1/5 meets the target: %v %v", *snap.AppVsZero, snap.Met)
	}
	if snap.First == nil || snap.First.App != 800 {
		t.Fatalf("first restore %+v", snap.First)
	}
	if *pool.AppVsZero != 0.8 || pool.Met == nil || *pool.Met {
		t.Fatalf("pool at 0.8 misses the target: %v %v", *pool.AppVsZero, pool.Met)
	}
	if wake.Met != nil || wake.Target != "" || *wake.AppVsZero != 0.31 {
		t.Fatalf("wake has no target: %+v", wake)
	}
	if r.PoolSaves == nil || r.PoolSaves.App != 400 || r.PoolSaves.Shell != 85 || r.PoolSaves.Deps != 100 {
		t.Fatalf("pool saves %+v", r.PoolSaves)
	}
	if *zero.AppVsDocker != 0.5 || *snap.AppVsDocker != 4 || wake.AppVsDocker != nil {
		t.Fatalf("vs docker: %v %v %v", zero.AppVsDocker, snap.AppVsDocker, wake.AppVsDocker)
	}
	if d := r.Docker[1]; d.Met != nil || *d.AppVsZero != 0.03 {
		t.Fatalf("docker scenarios have ratios but no target: %+v", d)
	}
	var out bytes.Buffer
	r.Workspace = &Workspace{NodeFiles: 1}
	printTask(&out, r)
	for _, want := range []string{"NOT met", ": met", "the pool saves", "first restore on this host"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, out.String())
		}
	}
}
