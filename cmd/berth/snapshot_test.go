package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/server"
)

// snapFake records what the snapshot, fork and backup commands send.
type snapFake struct {
	*fake
	sandbox     string // sandbox/source of the last call
	snapReq     api.SnapshotRequest
	listFilter  [2]string
	forkReq     api.ForkRequest
	backupReq   api.BackupRequest
	restoreID   string
	restoreReq  api.RestoreBackupRequest
	deleted     []string
	snapshotErr error
}

func newSnapCLI(t *testing.T) (*cli, *snapFake) {
	f := &snapFake{fake: &fake{files: map[string][]byte{}, modes: map[string]uint32{}}}
	ts := httptest.NewServer(server.New(f, server.Options{APIKey: "k"}))
	t.Cleanup(ts.Close)
	return &cli{t: t, url: ts.URL, f: f.fake}, f
}

var snapT0 = time.Now().Add(-2 * time.Hour)

func (f *snapFake) Snapshot(ctx context.Context, sandbox string, req api.SnapshotRequest) (api.Snapshot, error) {
	f.sandbox, f.snapReq = sandbox, req
	if f.snapshotErr != nil {
		return api.Snapshot{}, f.snapshotErr
	}
	return api.Snapshot{ID: "snap_00ab", Name: req.Name, Sandbox: sandbox, SizeBytes: 12_400_000, FreezeMs: 38.14}, nil
}

func (f *snapFake) GetSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	if id != "snap_00ab" {
		return api.Snapshot{}, errdefs.NotFound("snapshot %s not found", id)
	}
	return api.Snapshot{ID: id, Sandbox: "dev", Depth: 2}, nil
}

func (f *snapFake) ListSnapshots(ctx context.Context, sandbox, name string) ([]api.Snapshot, error) {
	f.listFilter = [2]string{sandbox, name}
	return []api.Snapshot{
		{ID: "snap_00ab", Name: "deps", Sandbox: "dev", SizeBytes: 2_000_000, Parent: "snap_0001", CreatedAt: snapT0, ExpiresAt: snapT0.Add(72 * time.Hour)},
		{ID: "snap_00cd", Sandbox: "dev", SizeBytes: 10},
	}, nil
}

func (f *snapFake) DeleteSnapshot(ctx context.Context, id string) error {
	if id == "snap_gone" {
		return errdefs.NotFound("snapshot %s not found", id)
	}
	f.deleted = append(f.deleted, id)
	return nil
}

func (f *snapFake) Fork(ctx context.Context, source string, req api.ForkRequest) (api.ForkResult, error) {
	f.sandbox, f.forkReq = source, req
	res := api.ForkResult{Snapshot: api.Snapshot{ID: "snap_f0"}}
	for i := range req.Count {
		name := fmt.Sprintf("%s-fork-%d", source, i+1)
		if len(req.Names) > 0 {
			name = req.Names[i]
		}
		res.Sandboxes = append(res.Sandboxes, api.Sandbox{Name: name})
	}
	return res, nil
}

func (f *snapFake) CreateBackup(ctx context.Context, sandbox string, req api.BackupRequest) (api.Backup, error) {
	f.sandbox, f.backupReq = sandbox, req
	return api.Backup{ID: "bak_01", Sandbox: sandbox, Dir: req.Dir, Files: 412, SizeBytes: 3_100_000}, nil
}

func (f *snapFake) ListBackups(ctx context.Context, sandbox string) ([]api.Backup, error) {
	f.sandbox = sandbox
	return []api.Backup{{ID: "bak_01", Name: "nightly", Sandbox: "dev", Dir: "/w", Files: 7, CreatedAt: snapT0, ExpiresAt: snapT0.Add(-time.Minute)}}, nil
}

func (f *snapFake) DeleteBackup(ctx context.Context, id string) error {
	f.deleted = append(f.deleted, id)
	return nil
}

func (f *snapFake) RestoreBackup(ctx context.Context, id string, req api.RestoreBackupRequest) (api.RestoreBackupResult, error) {
	f.restoreID, f.restoreReq = id, req
	dir := req.Dir
	if dir == "" {
		dir = "/w"
	}
	return api.RestoreBackupResult{Dir: dir, Files: 7, Bytes: 2048}, nil
}

func TestSnapshotCommands(t *testing.T) {
	c, f := newSnapCLI(t)
	code, out, errs := c.run("", "snapshot", "create", "dev", "--name", "deps", "--ttl", "72h")
	if code != 0 || out != "snap_00ab  12.4 MB  frozen 38.1 ms\n" {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	if f.sandbox != "dev" || f.snapReq != (api.SnapshotRequest{Name: "deps", TTL: "72h"}) {
		t.Fatalf("request %q %+v", f.sandbox, f.snapReq)
	}
	if errs != "" {
		t.Fatalf("no terminal, yet stderr got %q", errs)
	}
	code, out, _ = c.run("", "snap", "create", "dev", "--json")
	var s api.Snapshot
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil || s.ID != "snap_00ab" {
		t.Fatalf("create --json: %d %q", code, out)
	}

	code, out, errs = c.run("", "snapshot", "ls", "--sandbox", "dev", "--name", "deps")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || f.listFilter != [2]string{"dev", "deps"} {
		t.Fatalf("ls: %d %q %q filter %q", code, out, errs, f.listFilter)
	}
	for _, want := range []string{"ID", "NAME", "SANDBOX", "SIZE", "PARENT", "CREATED", "EXPIRES"} {
		if !strings.Contains(lines[0], want) {
			t.Fatalf("header %q lacks %s", lines[0], want)
		}
	}
	if f := strings.Fields(lines[1]); len(f) < 9 || f[0] != "snap_00ab" || f[1] != "deps" || f[2] != "dev" || f[5] != "snap_0001" || f[6] != "2h" || f[8] != "in" || f[9] != "2d" {
		t.Fatalf("row %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[1] != "-" || f[5] != "-" {
		t.Fatalf("row without name/parent %q", lines[2])
	}
	code, out, _ = c.run("", "snapshot", "ls", "--json")
	var list []api.Snapshot
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 2 {
		t.Fatalf("ls --json: %d %q", code, out)
	}

	if code, out, _ := c.run("", "snapshot", "get", "snap_00ab"); code != 0 || !strings.Contains(out, `"depth": 2`) {
		t.Fatalf("get: %d %q", code, out)
	}
	if code, _, errs := c.run("", "snapshot", "get", "snap_ff"); code != 1 || !strings.Contains(errs, "snapshot snap_ff not found") {
		t.Fatalf("get missing: %d %q", code, errs)
	}
	code, out, errs = c.run("", "snapshot", "rm", "snap_1", "snap_gone", "snap_2")
	if code != 1 || out != "snap_1\nsnap_2\n" || !strings.Contains(errs, "snap_gone: snapshot snap_gone not found") {
		t.Fatalf("rm: %d %q %q", code, out, errs)
	}
	// The server's validation reaches the user.
	if code, _, errs := c.run("", "snapshot", "create", "dev", "--ttl", "5s"); code != 1 || !strings.Contains(errs, "invalid ttl") {
		t.Fatalf("bad ttl: %d %q", code, errs)
	}
}

func TestSandboxCreateFromSnapshot(t *testing.T) {
	c := newCLI(t)
	if code, _, errs := c.run("", "sandbox", "create", "dev-2", "--snapshot", "snap_00ab", "--persist", "disk"); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if r := c.f.created; r.Name != "dev-2" || r.Snapshot != "snap_00ab" || r.Persist != "disk" {
		t.Fatalf("request %+v", r)
	}
	if code, _, errs := c.run("", "sandbox", "create", "x", "--persist", "cloud"); code != 1 || !strings.Contains(errs, "invalid persist") {
		t.Fatalf("bad persist: %d %q", code, errs)
	}
}

func TestForkCommand(t *testing.T) {
	c, f := newSnapCLI(t)
	code, out, errs := c.run("", "fork", "dev", "--count", "3")
	if code != 0 || out != "dev-fork-1\ndev-fork-2\ndev-fork-3\n" || !strings.Contains(errs, "snap_f0") {
		t.Fatalf("fork: %d %q %q", code, out, errs)
	}
	if f.sandbox != "dev" || f.forkReq.Count != 3 || f.forkReq.Names != nil {
		t.Fatalf("request %q %+v", f.sandbox, f.forkReq)
	}
	// Names alone set the count.
	code, out, _ = c.run("", "fork", "dev", "--name", "a", "--name", "b")
	if code != 0 || out != "a\nb\n" || f.forkReq.Count != 2 {
		t.Fatalf("named fork: %d %q %+v", code, out, f.forkReq)
	}
	code, out, _ = c.run("", "fork", "dev", "--count", "1", "--json")
	var res api.ForkResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Snapshot.ID != "snap_f0" || len(res.Sandboxes) != 1 {
		t.Fatalf("fork --json: %d %q", code, out)
	}
	if code, _, errs := c.run("", "fork", "dev"); code != 1 || !strings.Contains(errs, "--count") {
		t.Fatalf("no count: %d %q", code, errs)
	}
	if code, _, errs := c.run("", "fork", "dev", "--count", "3", "--name", "a"); code != 1 || !strings.Contains(errs, "names has 1 entries but count is 3") {
		t.Fatalf("mismatch: %d %q", code, errs)
	}
	if code, _, errs := c.run("", "fork", "dev", "--count", "101"); code != 1 || !strings.Contains(errs, "between 1 and 100") {
		t.Fatalf("101: %d %q", code, errs)
	}
}

func TestBackupCommands(t *testing.T) {
	c, f := newSnapCLI(t)
	code, out, errs := c.run("", "backup", "create", "dev", "/home/user/p", "--name", "n", "--ttl", "24h", "--exclude", "node_modules", "--exclude", "*.log", "--gitignore")
	if code != 0 || out != "bak_01  412 files  3.1 MB  dev:/home/user/p\n" {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	r := f.backupReq
	if f.sandbox != "dev" || r.Dir != "/home/user/p" || r.Name != "n" || r.TTL != "24h" || strings.Join(r.Exclude, "|") != "node_modules|*.log" || !r.Gitignore {
		t.Fatalf("request %q %+v", f.sandbox, r)
	}
	if code, _, errs := c.run("", "backup", "create", "dev"); code != 1 || !strings.Contains(errs, "2 arg") {
		t.Fatalf("no dir: %d %q", code, errs)
	}

	code, out, errs = c.run("", "backup", "restore", "bak_01", "--sandbox", "dev-2", "--dir", "copy")
	if code != 0 || out != "restored 7 files (2.0 kB) into dev-2:copy\n" || f.restoreID != "bak_01" || f.restoreReq != (api.RestoreBackupRequest{Sandbox: "dev-2", Dir: "copy"}) {
		t.Fatalf("restore: %d %q %q %+v", code, out, errs, f.restoreReq)
	}
	if code, _, errs := c.run("", "backup", "restore", "bak_01"); code != 1 || !strings.Contains(errs, `"sandbox" not set`) {
		t.Fatalf("restore without --sandbox: %d %q", code, errs)
	}

	code, out, _ = c.run("", "backup", "ls", "--sandbox", "dev")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || f.sandbox != "dev" || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], "expired") || !strings.Contains(lines[1], "nightly") {
		t.Fatalf("ls: %d %q", code, out)
	}
	code, out, _ = c.run("", "backup", "ls", "--json")
	var list []api.Backup
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || f.sandbox != "" {
		t.Fatalf("ls --json: %d %q", code, out)
	}
	f.deleted = nil
	if code, out, _ := c.run("", "backup", "rm", "bak_01", "bak_02"); code != 0 || out != "bak_01\nbak_02\n" || len(f.deleted) != 2 {
		t.Fatalf("rm: %d %q %v", code, out, f.deleted)
	}
}

// Every new command teaches with examples in its --help.
func TestSnapshotHelpHasExamples(t *testing.T) {
	for _, args := range [][]string{
		{"snapshot"}, {"snapshot", "create"}, {"snapshot", "ls"}, {"snapshot", "get"}, {"snapshot", "rm"},
		{"fork"},
		{"backup"}, {"backup", "create"}, {"backup", "restore"}, {"backup", "ls"}, {"backup", "rm"},
	} {
		code, out, errs := (&cli{t: t}).runRaw(append(args, "--help")...)
		if code != 0 || !strings.Contains(out, "Example") || !strings.Contains(out, "berth "+args[0]) {
			t.Errorf("%v --help: %d %q %q", args, code, out, errs)
		}
	}
	_, out, _ := (&cli{t: t}).runRaw("sandbox", "create", "--help")
	if !strings.Contains(out, "--snapshot") || !strings.Contains(out, "--persist") {
		t.Errorf("sandbox create --help lacks the snapshot flags: %s", out)
	}
}

// On a terminal, a long call shows that it is alive and then erases its
// line; off a terminal (the negative control, every other test here) it
// writes nothing.
func TestWaitingLineOnlyOnTerminal(t *testing.T) {
	c, f := newSnapCLI(t)
	stderrIsTerminal = func(io.Writer) bool { return true }
	t.Cleanup(func() { stderrIsTerminal = isTerminal })
	f.snapshotErr = errdefs.Unavailable("blob store down")
	code, _, errs := c.run("", "snapshot", "create", "dev")
	if code != 1 || !strings.HasPrefix(errs, "\r\x1b[Ksnapshotting dev... 0s") || !strings.Contains(errs, "\r\x1b[Kberth: blob store down") {
		t.Fatalf("%d %q", code, errs)
	}
	stderrIsTerminal = isTerminal
	var b bytes.Buffer
	a := &app{stderr: &b}
	a.waiting("x")()
	if b.Len() != 0 {
		t.Fatalf("non-terminal got %q", b.String())
	}
}
