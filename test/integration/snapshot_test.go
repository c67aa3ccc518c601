//go:build integration

package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	_ "modernc.org/sqlite" // the daemon's state database, to expire a backup
)

// workspace makes a node_modules-like tree of files in a sandbox.
func workspace(t *testing.T, name string, files int) {
	t.Helper()
	script := fmt.Sprintf(`python3 - <<'PY'
import os
base = "/home/user/proj/node_modules"
for i in range(%d):
    d = os.path.join(base, "pkg%%d" %% (i // 50))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%%d.js" %% i), "w") as f:
        f.write("module.exports = %%d;\n" %% i * 40)
PY`, files)
	if r := run(t, name, script); r.ExitCode != 0 {
		t.Fatalf("make workspace: %+v", r)
	}
}

func treeSum(t *testing.T, name, dir string) string {
	t.Helper()
	r := run(t, name, "cd "+dir+" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum")
	if r.ExitCode != 0 {
		t.Fatalf("tree sum: %+v", r)
	}
	return strings.Fields(r.Stdout)[0]
}

func TestSnapshotRestoreChainAndFork(t *testing.T) {
	ctx := context.Background()
	srcNet := &api.NetworkPolicy{Internet: true, Deny: []string{"blocked.example.test"}}
	sandbox(t, api.CreateSandboxRequest{Name: "it-snap-src", Network: srcNet})
	workspace(t, "it-snap-src", 2000)
	run(t, "it-snap-src", "echo v1 > /home/user/version")
	if r, err := d.c.Exec(ctx, "it-snap-src", api.ExecRequest{Command: "rm /etc/motd", User: "root"}); err != nil || r.ExitCode != 0 {
		t.Fatalf("delete a base-image file: %+v %v", r, err)
	}
	want := treeSum(t, "it-snap-src", "/home/user/proj")

	sn, err := d.c.Snapshot(ctx, "it-snap-src", api.SnapshotRequest{Name: "ws"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot %s: %d files, %d bytes compressed, frozen %.2f ms", sn.ID, sn.Files, sn.SizeBytes, sn.FreezeMs)
	if sn.Parent != "" || sn.Depth != 1 || !strings.HasPrefix(sn.BaseImageDigest, "sha256:") || sn.ExpiresAt.Before(time.Now().Add(29*24*time.Hour)) {
		t.Fatalf("snapshot handle: %+v", sn)
	}
	// The source keeps working and its later writes are not in the snapshot.
	run(t, "it-snap-src", "echo v2 > /home/user/version")

	// Restore into a new sandbox.
	t0 := time.Now()
	sandbox(t, api.CreateSandboxRequest{Name: "it-snap-r1", Snapshot: sn.ID})
	r := run(t, "it-snap-r1", "cat /home/user/version; test -e /etc/motd && echo motd-back || echo motd-gone")
	t.Logf("restore to first exec: %s", time.Since(t0).Round(time.Millisecond))
	if r.Stdout != "v1\nmotd-gone\n" {
		t.Fatalf("restored files: %q", r.Stdout)
	}
	if got := treeSum(t, "it-snap-r1", "/home/user/proj"); got != want {
		t.Fatalf("restored workspace differs")
	}
	// A snapshot of the restored sandbox is incremental: it stores only
	// the change and records its parent.
	run(t, "it-snap-r1", "echo v3 > /home/user/version")
	child, err := d.c.Snapshot(ctx, "it-snap-r1", api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if child.Parent != sn.ID || child.Depth != 2 || child.SizeBytes >= sn.SizeBytes/4 {
		t.Fatalf("child snapshot not incremental: %+v (parent size %d)", child, sn.SizeBytes)
	}
	sandbox(t, api.CreateSandboxRequest{Name: "it-snap-r2", Snapshot: child.ID})
	if r := run(t, "it-snap-r2", "cat /home/user/version"); r.Stdout != "v3\n" {
		t.Fatalf("chain restore: %q", r.Stdout)
	}
	if got := treeSum(t, "it-snap-r2", "/home/user/proj"); got != want {
		t.Fatalf("chain restore lost the base layer's files")
	}
	// The parent cannot be deleted while others stand on it.
	if err := d.c.DeleteSnapshot(ctx, sn.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("delete of a needed snapshot: %v", err)
	}
	// Listing: all, by sandbox, by name.
	if l, err := d.c.ListSnapshots(ctx, "it-snap-src", ""); err != nil || len(l) != 1 || l[0].ID != sn.ID {
		t.Fatalf("list by sandbox: %+v %v", l, err)
	}
	if l, err := d.c.ListSnapshots(ctx, "", "ws"); err != nil || len(l) != 1 {
		t.Fatalf("list by name: %+v %v", l, err)
	}

	// Fork 10: each fork is independent.
	t0 = time.Now()
	fr, err := d.c.Fork(ctx, "it-snap-src", api.ForkRequest{Count: 10})
	forkTime := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range fr.Sandboxes {
		name := s.Name
		t.Cleanup(func() { _ = d.c.Destroy(context.Background(), name) })
	}
	t.Logf("fork 10: %s", forkTime.Round(time.Millisecond))
	if len(fr.Sandboxes) != 10 {
		t.Fatalf("forks: %d", len(fr.Sandboxes))
	}
	for _, s := range fr.Sandboxes {
		// A fork keeps the source's egress rules, not just internet on/off.
		if s.Network == nil || !s.Network.Internet || len(s.Network.Deny) != 1 || s.Network.Deny[0] != srcNet.Deny[0] {
			t.Fatalf("fork %s has network %+v, want the source's %+v", s.Name, s.Network, srcNet)
		}
	}
	run(t, fr.Sandboxes[0].Name, "echo mine > /home/user/version")
	if r := run(t, fr.Sandboxes[1].Name, "cat /home/user/version"); r.Stdout != "v2\n" {
		t.Fatalf("fork 1 sees %q; forks must be independent and start from the source's current files", r.Stdout)
	}
	// Nothing is copied per fork: all share one cached layer dir.
	lowers := map[string]bool{}
	for _, s := range fr.Sandboxes {
		lowers[lowerOf(t, s.ID)] = true
	}
	if len(lowers) != 1 {
		t.Fatalf("forks use %d different top lowers, want 1 shared", len(lowers))
	}

	// Errors: missing snapshot, image mismatch.
	_, _, err = d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-snap-bad", Snapshot: "snap_00000000deadbeef"})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "snapshot snap_00000000deadbeef not found") {
		t.Fatalf("missing snapshot: %v", err)
	}
	if _, err := d.c.Get(ctx, "it-snap-bad"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a failed restore left a sandbox behind: %v", err)
	}
}

// dropAdopted makes the host that took a snapshot forget its layer of it
// (the adopted frozen copy, which restores there use instead of the
// blob), as a host that did not take it has none: the next restore goes
// through the blob. It fails the test if the layer was not adopted.
func dropAdopted(t *testing.T, sum string) {
	t.Helper()
	slot := filepath.Join(dataDir, "uppers", ".layers@cache", strings.TrimPrefix(sum, "sha256:")[:12])
	if _, err := os.Stat(slot + ".subvol"); err != nil {
		t.Fatalf("the snapshot's layer was not adopted on the host that took it: %v", err)
	}
	if err := os.Remove(slot + ".sha256"); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreFromBlobEqualsAdopted (issue 15 item 4): a restore on the
// host that took the snapshot (its adopted frozen copy) and one that
// builds the layer from the blob, as any other host does (a verified
// EROFS image, mounted), give the same files: the sha256 tree of the
// workspace, modes and owners included.
func TestRestoreFromBlobEqualsAdopted(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-adopt-src"})
	workspace(t, "it-adopt-src", 500)
	run(t, "it-adopt-src", "cd /home/user/proj && ln -s node_modules/pkg0 link && ln node_modules/pkg0/f0.js hard.js && chmod 4755 node_modules/pkg1/f50.js && mkfifo fifo && python3 -c \"import os; os.setxattr('hard.js', 'user.k', b'v')\"")
	// (No directory link counts: btrfs reports 1 for every directory.)
	const listing = "cd /home/user/proj && find . -printf '%y %m %U:%G %p %l\\n' | sort && stat -c '%h %n' hard.js node_modules/pkg0/f0.js"
	want, wantList := treeSum(t, "it-adopt-src", "/home/user/proj"), run(t, "it-adopt-src", listing).Stdout
	sn, err := d.c.Snapshot(ctx, "it-adopt-src", api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	slot := filepath.Join(dataDir, "uppers", ".layers@cache", strings.TrimPrefix(sn.SHA256, "sha256:")[:12])
	check := func(name string) {
		t.Helper()
		if got := treeSum(t, name, "/home/user/proj"); got != want {
			t.Fatalf("%s: workspace differs from the source", name)
		}
		if got := run(t, name, listing).Stdout; got != wantList {
			t.Fatalf("%s: listing differs:\n%s\nwant\n%s", name, got, wantList)
		}
		if r := run(t, name, "getfattr -d /home/user/proj/hard.js 2>/dev/null; python3 -c \"import os; print(os.listxattr('/home/user/proj/hard.js'))\""); !strings.Contains(r.Stdout, "[]") {
			t.Fatalf("%s: xattrs came through: %q", name, r.Stdout)
		}
	}
	sandbox(t, api.CreateSandboxRequest{Name: "it-adopt-a", Snapshot: sn.ID})
	check("it-adopt-a")
	if err := d.c.Destroy(ctx, "it-adopt-a"); err != nil {
		t.Fatal(err)
	}
	// As on a host that did not take it: the layer comes from the blob.
	dropAdopted(t, sn.SHA256)
	sandbox(t, api.CreateSandboxRequest{Name: "it-adopt-b", Snapshot: sn.ID})
	if _, err := os.Stat(slot + ".erofs"); err != nil {
		if _, serr := os.Stat(slot + ".subvol"); serr == nil {
			t.Fatal("the restore used the dropped adopted layer")
		}
		t.Logf("no EROFS image (this host unpacks layers): %v", err)
	}
	check("it-adopt-b")
}

// lowerOf returns the top (last) lowerdir of a sandbox's overlay mount.
// When that is an idmapped view of a layer (a sandbox in a user
// namespace), it returns the layer the view shows: its filesystem and the
// directory inside it.
func lowerOf(t *testing.T, id string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for _, line := range lines {
		if strings.Contains(line, filepath.Join(id, "rootfs")+" ") {
			i := strings.Index(line, "lowerdir=")
			if i < 0 {
				continue
			}
			opt := line[i+len("lowerdir="):]
			opt = strings.Split(opt, ",")[0]
			top := strings.Split(opt, ":")[0] // overlay lists the top layer first
			for _, l := range lines {
				f := strings.Fields(l)
				if len(f) > 4 && f[4] == top {
					return f[2] + ":" + f[3] // device and root of the idmapped view
				}
			}
			return top
		}
	}
	t.Fatalf("no overlay mount for %s", id)
	return ""
}

func TestPersistDiskSurvivesLostLayer(t *testing.T) {
	ctx := context.Background()
	sb := sandbox(t, api.CreateSandboxRequest{Name: "it-persist", Persist: api.PersistDisk})
	run(t, "it-persist", "echo durable > /home/user/keep.txt")
	if err := d.c.Sleep(ctx, "it-persist"); err != nil {
		t.Fatal(err)
	}
	// Lose the local writable layer, as if the sandbox woke on another host.
	d.kill9()
	upper := filepath.Join(dataDir, "uppers", sb.ID)
	if _, err := os.Stat(upper); err != nil {
		t.Fatalf("expected the local layer at %s: %v", upper, err)
	}
	if out, err := execCmd("btrfs", "subvolume", "delete", upper); err != nil {
		t.Fatalf("delete local layer: %v %s", err, out)
	}
	var err error
	if d, err = startDaemon(nil); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "it-persist", "cat /home/user/keep.txt"); r.Stdout != "durable\n" {
		t.Fatalf("after losing the local layer: %+v", r)
	}
}

func TestBackupRoundTrip(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-bk-a"})
	sandbox(t, api.CreateSandboxRequest{Name: "it-bk-b"})
	run(t, "it-bk-a", `mkdir -p "/home/user/data/sub dir/日本語" && echo hello > "/home/user/data/sub dir/日本語/résumé notes.txt" && echo skip > /home/user/data/x.log && head -c 1500000 /dev/urandom > /home/user/data/blob.bin`)
	want := treeSum(t, "it-bk-a", "/home/user/data")
	b, err := d.c.CreateBackup(ctx, "it-bk-a", api.BackupRequest{Dir: "/home/user/data", Name: "data"})
	if err != nil {
		t.Fatal(err)
	}
	// Restore into another sandbox, replacing what was there.
	run(t, "it-bk-b", "mkdir -p /home/user/target && echo old > /home/user/target/old.txt")
	res, err := d.c.RestoreBackup(ctx, b.ID, api.RestoreBackupRequest{Sandbox: "it-bk-b", Dir: "/home/user/target"})
	if err != nil {
		t.Fatal(err)
	}
	if got := treeSum(t, "it-bk-b", "/home/user/target"); got != want {
		t.Fatalf("restored tree differs (%+v)", res)
	}
	// The record counts what the restore counts (issue 12 item 12).
	if b.Files != 3 || res.Files != 3 {
		t.Fatalf("files: backup record %d, restore %d, want 3", b.Files, res.Files)
	}
	if list, err := d.c.ListBackups(ctx, "it-bk-a"); err != nil || len(list) != 1 || list[0].Files != 3 {
		t.Fatalf("listed backup's files: %+v %v", list, err)
	}
	if r := run(t, "it-bk-b", "test -e /home/user/target/old.txt && echo stale || echo replaced"); r.Stdout != "replaced\n" {
		t.Fatalf("restore did not replace the directory: %q", r.Stdout)
	}
	// Excludes.
	b2, err := d.c.CreateBackup(ctx, "it-bk-a", api.BackupRequest{Dir: "/home/user/data", Exclude: []string{"*.log"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.RestoreBackup(ctx, b2.ID, api.RestoreBackupRequest{Sandbox: "it-bk-b", Dir: "/home/user/t2"}); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "it-bk-b", "ls /home/user/t2"); strings.Contains(r.Stdout, "x.log") {
		t.Fatalf("excluded file restored: %q", r.Stdout)
	}
	// A tampered blob is refused and the target is left as it was.
	blobPath := filepath.Join(dataDir, "blobs", "blobs", "backups", b.ID+".tar.zst.blob~")
	data, err := os.ReadFile(blobPath)
	if err != nil {
		t.Fatalf("read blob: %v", err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(blobPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.RestoreBackup(ctx, b.ID, api.RestoreBackupRequest{Sandbox: "it-bk-b", Dir: "/home/user/t2"}); err == nil {
		t.Fatal("tampered backup restored")
	}
	if r := run(t, "it-bk-b", "ls /home/user/t2 | sort | tr '\\n' ' '"); r.Stdout != "blob.bin sub dir " {
		t.Fatalf("failed restore changed the target: %q", r.Stdout)
	}
	if list, err := d.c.ListBackups(ctx, "it-bk-a"); err != nil || len(list) != 2 {
		t.Fatalf("list backups: %+v %v", list, err)
	}
}

var _ = io.EOF

// A tampered snapshot blob is refused before anything is unpacked, and a
// daemon killed mid-snapshot leaves no visible half-snapshot, no orphaned
// mounts or layer copies, and the next snapshot works (checklist #10, #29).
func TestSnapshotFaults(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-snapfault"})
	run(t, "it-snapfault", "echo data > /home/user/f")
	sn, err := d.c.Snapshot(ctx, "it-snapfault", api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Restores below go through the blob, as on a host that did not take it.
	dropAdopted(t, sn.SHA256)
	blobPath := filepath.Join(dataDir, "blobs", "blobs", "snapshots", sn.ID+".tar.zst.blob~")
	data, err := os.ReadFile(blobPath)
	if err != nil {
		t.Fatal(err)
	}
	orig := append([]byte(nil), data...)
	data[len(data)-10] ^= 0x55
	if err := os.WriteFile(blobPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-snapfault-r", Snapshot: sn.ID}); err == nil {
		t.Fatal("sandbox started from a tampered snapshot")
	}
	// A failed restore leaves no partial state.
	if _, err := d.c.Get(ctx, "it-snapfault-r"); !errors.Is(err, errdefs.ErrNotFound) {
		_ = d.c.Destroy(ctx, "it-snapfault-r")
		t.Fatalf("after a refused restore of a tampered snapshot the sandbox is still there (%v)", err)
	}
	// Truncated blob: refused too.
	if err := os.WriteFile(blobPath, orig[:len(orig)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-snapfault-r", Snapshot: sn.ID}); err == nil {
		t.Fatal("sandbox started from a truncated snapshot")
	}
	// A failed restore leaves no partial state.
	if _, err := d.c.Get(ctx, "it-snapfault-r"); !errors.Is(err, errdefs.ErrNotFound) {
		_ = d.c.Destroy(ctx, "it-snapfault-r")
		t.Fatalf("after a refused restore of a truncated snapshot the sandbox is still there (%v)", err)
	}
	// Control: the intact blob restores.
	if err := os.WriteFile(blobPath, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	sandbox(t, api.CreateSandboxRequest{Name: "it-snapfault-ok", Snapshot: sn.ID})
	if r := run(t, "it-snapfault-ok", "cat /home/user/f"); r.Stdout != "data\n" {
		t.Fatalf("intact snapshot: %q", r.Stdout)
	}

	// Crash right after the blob is uploaded, before it is recorded.
	before := takeCensus(t)
	d.kill9()
	if d, err = startDaemon([]string{"BERTH_FAILPOINTS=snapshot.uploaded=exit"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Snapshot(ctx, "it-snapfault", api.SnapshotRequest{Name: "half"}); err == nil {
		t.Fatal("failpoint did not fire")
	}
	_ = d.cmd.Wait()
	if d, err = startDaemon(nil); err != nil {
		t.Fatal(err)
	}
	if l, _ := d.c.ListSnapshots(ctx, "", "half"); len(l) != 0 {
		t.Fatalf("half-made snapshot is visible: %+v", l)
	}
	ents, _ := os.ReadDir(filepath.Join(dataDir, "blobs", "blobs", "snapshots"))
	for _, e := range ents {
		id := strings.TrimSuffix(e.Name(), ".tar.zst.blob~")
		if _, err := d.c.GetSnapshot(ctx, id); err != nil {
			t.Fatalf("blob %s has no snapshot record after restart", e.Name())
		}
	}
	uppers, _ := os.ReadDir(filepath.Join(dataDir, "uppers"))
	for _, e := range uppers {
		if strings.HasPrefix(e.Name(), ".snap") {
			t.Fatalf("leftover layer copy %s", e.Name())
		}
	}
	if after := takeCensus(t); !equalCensus(before, after) {
		t.Fatalf("host resources changed across the crash:\nbefore %+v\nafter  %+v", before, after)
	}
	if _, err := d.c.Snapshot(ctx, "it-snapfault", api.SnapshotRequest{Name: "after"}); err != nil {
		t.Fatalf("next snapshot: %v", err)
	}
}

// TestBackupGitignoreFromRepoRoot (issue 12 item 11): a backup of a
// subdirectory with gitignore applies the repository root's .gitignore
// (a *.log rule and an anchored sub/build/ rule) and .git/info/exclude.
func TestBackupGitignoreFromRepoRoot(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-bk-git"})
	run(t, "it-bk-git", `set -e; cd /home/user && mkdir -p repo/sub/build repo/sub/x/build repo/.git/info && cd repo &&
		printf '*.log\nsub/build/\n' > .gitignore && echo 'secret*' > .git/info/exclude &&
		echo a > sub/a.go && echo l > sub/a.log && echo o > sub/build/out.bin && echo k > sub/x/build/keep && echo s > sub/secret.txt`)
	b, err := d.c.CreateBackup(ctx, "it-bk-git", api.BackupRequest{Dir: "/home/user/repo/sub", Gitignore: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.RestoreBackup(ctx, b.ID, api.RestoreBackupRequest{Sandbox: "it-bk-git", Dir: "/home/user/restored"}); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "it-bk-git", "cd /home/user/restored && find . -mindepth 1 | sort | tr '\\n' ' '"); r.Stdout != "./a.go ./x ./x/build ./x/build/keep " {
		t.Fatalf("restored: %q", r.Stdout)
	}
	if b.Files != 2 {
		t.Fatalf("backup files %d, want 2", b.Files)
	}
}

// TestRestoreExpiredBackup (issue 12 item 13): restoring a backup past
// its TTL is "expired" (410) and says when, not "not found"; it is still
// deletable. The test moves the backup's expiry into the past in the
// daemon's state database (the shortest TTL is a minute).
func TestRestoreExpiredBackup(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-bk-exp"})
	run(t, "it-bk-exp", "mkdir -p /home/user/d && echo x > /home/user/d/f")
	b, err := d.c.CreateBackup(ctx, "it-bk-exp", api.BackupRequest{Dir: "/home/user/d", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dataDir, "state.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exp := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	if _, err := db.ExecContext(ctx, `UPDATE backups SET expires_at = ? WHERE id = ?`, exp.UnixMilli(), b.ID); err != nil {
		t.Fatal(err)
	}
	_, err = d.c.RestoreBackup(ctx, b.ID, api.RestoreBackupRequest{Sandbox: "it-bk-exp", Dir: "/home/user/r"})
	if !errors.Is(err, errdefs.ErrExpired) || !strings.Contains(err.Error(), "expired at "+exp.Format(time.RFC3339)) {
		t.Fatalf("restore of an expired backup: %v", err)
	}
	if list, err := d.c.ListBackups(ctx, "it-bk-exp"); err != nil || len(list) != 0 {
		t.Fatalf("listed an expired backup: %+v %v", list, err)
	}
	if err := d.c.DeleteBackup(ctx, b.ID); err != nil {
		t.Fatalf("delete an expired backup: %v", err)
	}
	if _, err := d.c.RestoreBackup(ctx, b.ID, api.RestoreBackupRequest{Sandbox: "it-bk-exp"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// TestForkReusesUnchangedSnapshot: a fork of a sandbox whose files did not
// change since its last fork stands on that fork's snapshot instead of
// capturing again; any change (content, mode only, a delete) makes the
// next fork take a new snapshot that shows it. The forks' files equal the
// source's by sha256 tree either way.
func TestForkReusesUnchangedSnapshot(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-freuse-src"})
	workspace(t, "it-freuse-src", 300)
	fork := func(step string) api.ForkResult {
		t.Helper()
		names := []string{"it-freuse-" + step + "-a", "it-freuse-" + step + "-b"}
		fr, err := d.c.Fork(ctx, "it-freuse-src", api.ForkRequest{Count: 2, Names: names})
		if err != nil {
			t.Fatalf("fork %s: %v", step, err)
		}
		for _, n := range names {
			n := n
			t.Cleanup(func() { _ = d.c.Destroy(context.Background(), n) })
		}
		want := treeSum(t, "it-freuse-src", "/home/user/proj")
		for _, s := range fr.Sandboxes {
			if got := treeSum(t, s.Name, "/home/user/proj"); got != want {
				t.Fatalf("fork %s: %s has tree %s, the source %s", step, s.Name, got, want)
			}
		}
		return fr
	}
	// Files changed within ctimeSlack (50 ms) before a fork's snapshot
	// count as changed after it (coarse timestamps): let them age.
	time.Sleep(100 * time.Millisecond)
	first := fork("1")
	if again := fork("2"); again.Snapshot.ID != first.Snapshot.ID {
		t.Fatalf("unchanged source: second fork took snapshot %s, want the first's %s reused", again.Snapshot.ID, first.Snapshot.ID)
	}

	// A content change: a new snapshot, and the forks see the change.
	run(t, "it-freuse-src", "echo changed > /home/user/proj/node_modules/pkg0/f0.js")
	time.Sleep(100 * time.Millisecond)
	changed := fork("3")
	if changed.Snapshot.ID == first.Snapshot.ID {
		t.Fatal("a changed file did not make the fork take a new snapshot")
	}
	if r := run(t, changed.Sandboxes[0].Name, "cat /home/user/proj/node_modules/pkg0/f0.js"); r.Stdout != "changed\n" {
		t.Fatalf("fork after a change reads %q", r.Stdout)
	}

	// A mode-only change, with the mtime put back: still a new snapshot.
	run(t, "it-freuse-src", `cd /home/user/proj/node_modules/pkg1 && m=$(stat -c %y f50.js) && chmod 600 f50.js && touch -d "$m" f50.js`)
	time.Sleep(100 * time.Millisecond)
	moded := fork("4")
	if moded.Snapshot.ID == changed.Snapshot.ID {
		t.Fatal("a mode change did not make the fork take a new snapshot")
	}
	if r := run(t, moded.Sandboxes[0].Name, "stat -c %a /home/user/proj/node_modules/pkg1/f50.js"); r.Stdout != "600\n" {
		t.Fatalf("fork after chmod sees mode %q", r.Stdout)
	}

	// A delete.
	run(t, "it-freuse-src", "rm /home/user/proj/node_modules/pkg2/f100.js")
	time.Sleep(100 * time.Millisecond)
	deleted := fork("5")
	if deleted.Snapshot.ID == moded.Snapshot.ID {
		t.Fatal("a delete did not make the fork take a new snapshot")
	}
	if r := run(t, deleted.Sandboxes[1].Name, "test -e /home/user/proj/node_modules/pkg2/f100.js; echo $?"); r.Stdout != "1\n" {
		t.Fatalf("fork after a delete still has the file: %q", r.Stdout)
	}
	if again := fork("6"); again.Snapshot.ID != deleted.Snapshot.ID {
		t.Fatalf("unchanged again: fork took %s, want %s reused", again.Snapshot.ID, deleted.Snapshot.ID)
	}
}
