package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/server"
)

// snapFake adds snapshots, forks and backups to fake.
type snapFake struct {
	*fake
	smu     sync.Mutex
	n       int
	snaps   map[string]api.Snapshot
	backups map[string]api.Backup
	// block, when set, is waited on by Snapshot (to hold a call open).
	block func(ctx context.Context) error
}

func newSnapFake() *snapFake {
	return &snapFake{fake: newFake(), snaps: map[string]api.Snapshot{}, backups: map[string]api.Backup{}}
}

func startSnap(t *testing.T, f *snapFake, hc *http.Client) *Client {
	t.Helper()
	ts := httptest.NewServer(server.New(f, server.Options{APIKey: key}))
	t.Cleanup(ts.Close)
	var opts []Option
	if hc != nil {
		opts = append(opts, WithHTTPClient(hc))
	}
	return New(ts.URL, key, opts...)
}

func (f *snapFake) Snapshot(ctx context.Context, sandbox string, req api.SnapshotRequest) (api.Snapshot, error) {
	if f.block != nil {
		if err := f.block(ctx); err != nil {
			return api.Snapshot{}, err
		}
	}
	f.smu.Lock()
	defer f.smu.Unlock()
	if sandbox == "nobox" {
		return api.Snapshot{}, errdefs.NotFound("sandbox %q not found", sandbox)
	}
	f.n++
	s := api.Snapshot{ID: fmt.Sprintf("snap_%04x", f.n), Name: req.Name, Sandbox: sandbox, SizeBytes: int64(f.n), FreezeMs: 2.5}
	f.snaps[s.ID] = s
	return s, nil
}

func (f *snapFake) GetSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	s, ok := f.snaps[id]
	if !ok {
		return s, errdefs.NotFound("snapshot %s not found", id)
	}
	return s, nil
}

func (f *snapFake) ListSnapshots(ctx context.Context, sandbox, name string) ([]api.Snapshot, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	var out []api.Snapshot
	for _, s := range f.snaps {
		if (sandbox == "" || s.Sandbox == sandbox) && (name == "" || s.Name == name) {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (f *snapFake) DeleteSnapshot(ctx context.Context, id string) error {
	f.smu.Lock()
	defer f.smu.Unlock()
	if _, ok := f.snaps[id]; !ok {
		return errdefs.NotFound("snapshot %s not found", id)
	}
	delete(f.snaps, id)
	return nil
}

func (f *snapFake) Fork(ctx context.Context, source string, req api.ForkRequest) (api.ForkResult, error) {
	s, err := f.Snapshot(ctx, source, api.SnapshotRequest{})
	if err != nil {
		return api.ForkResult{}, err
	}
	res := api.ForkResult{Snapshot: s}
	for i := range req.Count {
		name := fmt.Sprintf("%s-fork-%d", source, i+1)
		if len(req.Names) > 0 {
			name = req.Names[i]
		}
		res.Sandboxes = append(res.Sandboxes, api.Sandbox{Name: name, Snapshot: s.ID})
	}
	return res, nil
}

func (f *snapFake) CreateBackup(ctx context.Context, sandbox string, req api.BackupRequest) (api.Backup, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	f.n++
	b := api.Backup{ID: fmt.Sprintf("bak_%04x", f.n), Name: req.Name, Sandbox: sandbox, Dir: req.Dir, Files: int64(len(req.Exclude))}
	f.backups[b.ID] = b
	return b, nil
}

func (f *snapFake) ListBackups(ctx context.Context, sandbox string) ([]api.Backup, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	var out []api.Backup
	for _, b := range f.backups {
		if sandbox == "" || b.Sandbox == sandbox {
			out = append(out, b)
		}
	}
	return out, nil
}

func (f *snapFake) DeleteBackup(ctx context.Context, id string) error {
	f.smu.Lock()
	defer f.smu.Unlock()
	if _, ok := f.backups[id]; !ok {
		return errdefs.NotFound("backup %s not found", id)
	}
	delete(f.backups, id)
	return nil
}

func (f *snapFake) RestoreBackup(ctx context.Context, id string, req api.RestoreBackupRequest) (api.RestoreBackupResult, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	b, ok := f.backups[id]
	if !ok {
		return api.RestoreBackupResult{}, errdefs.NotFound("backup %s not found", id)
	}
	dir := req.Dir
	if dir == "" {
		dir = b.Dir
	}
	return api.RestoreBackupResult{Dir: req.Sandbox + ":" + dir, Files: b.Files}, nil
}

func TestSnapshotCalls(t *testing.T) {
	c := startSnap(t, newSnapFake(), nil)
	ctx := context.Background()
	s1, err := c.Snapshot(ctx, "box", api.SnapshotRequest{Name: "base", TTL: "1h"})
	if err != nil || s1.ID == "" || s1.Name != "base" || s1.Sandbox != "box" || s1.FreezeMs != 2.5 {
		t.Fatalf("snapshot %+v %v", s1, err)
	}
	s2, err := c.Snapshot(ctx, "other", api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetSnapshot(ctx, s1.ID); err != nil || got != s1 {
		t.Fatalf("get %+v %v", got, err)
	}
	all, err := c.ListSnapshots(ctx, "", "")
	if err != nil || len(all) != 2 {
		t.Fatalf("list all %+v %v", all, err)
	}
	if l, err := c.ListSnapshots(ctx, "box", "base"); err != nil || len(l) != 1 || l[0].ID != s1.ID {
		t.Fatalf("list filtered %+v %v", l, err)
	}
	if l, err := c.ListSnapshots(ctx, "box", "nope"); err != nil || l == nil || len(l) != 0 {
		t.Fatalf("empty list should be empty, not nil: %#v %v", l, err)
	}
	if err := c.DeleteSnapshot(ctx, s2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSnapshot(ctx, s2.ID); !errors.Is(err, errdefs.ErrNotFound) || err.Error() != "snapshot "+s2.ID+" not found" {
		t.Fatalf("get deleted: %v", err)
	}
	if err := c.DeleteSnapshot(ctx, s2.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("delete deleted: %v", err)
	}
	if _, err := c.Snapshot(ctx, "nobox", api.SnapshotRequest{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("snapshot of missing sandbox: %v", err)
	}
	// The server's validation comes back as its kind and message.
	if _, err := c.GetSnapshot(ctx, "../etc"); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "invalid snapshot id") {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := c.Snapshot(ctx, "box", api.SnapshotRequest{TTL: "1s"}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "ttl") {
		t.Fatalf("bad ttl: %v", err)
	}
}

func TestForkAndBackupCalls(t *testing.T) {
	c := startSnap(t, newSnapFake(), nil)
	ctx := context.Background()
	res, err := c.Fork(ctx, "src", api.ForkRequest{Count: 3})
	if err != nil || len(res.Sandboxes) != 3 || res.Sandboxes[2].Name != "src-fork-3" || res.Sandboxes[0].Snapshot != res.Snapshot.ID {
		t.Fatalf("fork %+v %v", res, err)
	}
	if res, err := c.Fork(ctx, "src", api.ForkRequest{Count: 1, Names: []string{"w"}}); err != nil || res.Sandboxes[0].Name != "w" {
		t.Fatalf("named fork %+v %v", res, err)
	}
	if _, err := c.Fork(ctx, "src", api.ForkRequest{Count: 2, Names: []string{"w"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("names mismatch: %v", err)
	}

	b, err := c.CreateBackup(ctx, "box", api.BackupRequest{Dir: "/w", Name: "n", Exclude: []string{"a", "b"}, Gitignore: true})
	if err != nil || b.ID == "" || b.Dir != "/w" || b.Files != 2 {
		t.Fatalf("backup %+v %v", b, err)
	}
	c.CreateBackup(ctx, "other", api.BackupRequest{Dir: "x"})
	if l, err := c.ListBackups(ctx, "box"); err != nil || len(l) != 1 || l[0].ID != b.ID {
		t.Fatalf("list %+v %v", l, err)
	}
	if l, err := c.ListBackups(ctx, ""); err != nil || len(l) != 2 {
		t.Fatalf("list all %+v %v", l, err)
	}
	rr, err := c.RestoreBackup(ctx, b.ID, api.RestoreBackupRequest{Sandbox: "third"})
	if err != nil || rr.Dir != "third:/w" {
		t.Fatalf("restore %+v %v", rr, err)
	}
	if err := c.DeleteBackup(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RestoreBackup(ctx, b.ID, api.RestoreBackupRequest{Sandbox: "third"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("restore deleted: %v", err)
	}
	if _, err := c.CreateBackup(ctx, "box", api.BackupRequest{}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "dir is required") {
		t.Fatalf("no dir: %v", err)
	}
}

// A Timeout meant for quick calls must not cut a snapshot off half-way.
// The negative control shows the same client does cut a quick call.
func TestLongCallsIgnoreClientTimeout(t *testing.T) {
	const timeout = 20 * time.Millisecond
	f := newSnapFake()
	c := startSnap(t, f, &http.Client{Timeout: timeout})
	ctx := context.Background()

	// Held open well past the timeout, then answered.
	f.block = func(ctx context.Context) error {
		select {
		case <-time.After(10 * timeout):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if _, err := c.Snapshot(ctx, "box", api.SnapshotRequest{}); err != nil {
		t.Fatalf("snapshot longer than the client timeout: %v", err)
	}
	if c.hc.Timeout != timeout {
		t.Fatal("the long call changed the caller's HTTP client")
	}

	// Negative control: the same request sent without long() is cut by
	// the timeout (the server answers only once the client has gone).
	f.block = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath("box", "snapshots"), nil, api.SnapshotRequest{}, nil)
	if err == nil {
		t.Fatal("negative control: the client timeout did not fire")
	}
}
