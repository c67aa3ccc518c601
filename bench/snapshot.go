package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// SnapshotReport is the snapshot scenario: a ~200 MB, 10k-file workspace.
type SnapshotReport struct {
	WorkspaceFiles int     `json:"workspace_files"`
	WorkspaceBytes int64   `json:"workspace_bytes"`
	CreateFromZero float64 `json:"recreate_from_scratch_ms"`
	Snapshot       float64 `json:"snapshot_ms"`
	Freeze         float64 `json:"freeze_ms"`
	SnapshotBytes  int64   `json:"snapshot_bytes"`
	Restore        float64 `json:"restore_to_first_exec_ms"`
	RestoreWarm    float64 `json:"restore_warm_to_first_exec_ms"` // second restore: layer already on this host
	Fork10         float64 `json:"fork10_ms"`
	// Fork10Unchanged is a second fork 10 of the unchanged source: it
	// stands on the first fork's snapshot (no capture).
	Fork10Unchanged float64  `json:"fork10_unchanged_ms"`
	TarZstd         *float64 `json:"tar_zstd_ms"`
	SnapshotVsTar   *float64 `json:"snapshot_vs_tar_zstd,omitempty"`
	RestoreVsCreate *float64 `json:"restore_vs_recreate,omitempty"`
}

// generator writes ~20 KiB JavaScript-like files, 50 to a directory, so the
// tree looks like node_modules: many small, compressible files.
const generator = `python3 - <<'PY'
import os, random
random.seed(1)
base = "/home/user/ws/node_modules"
words = ["function", "return", "const", "require", "module", "exports", "async", "await", "this", "value"]
total = 0
for i in range(%d):
    d = os.path.join(base, "pkg%%d" %% (i // 50), "lib")
    os.makedirs(d, exist_ok=True)
    body = " ".join(random.choice(words) + str(random.randrange(100000)) for _ in range(1700))
    with open(os.path.join(d, "m%%d.js" %% i), "w") as f:
        f.write(body)
    total += len(body)
print(total)
PY`

func snapshotScenario(ctx context.Context, c *client.Client, o Options, run string, logf func(string, ...any)) (*SnapshotReport, error) {
	const files = 10000
	src := fmt.Sprintf("bench-%s-snap", run)
	if _, _, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: src, Image: o.Image, Instance: o.Instance, Isolation: o.Isolation}); err != nil {
		return nil, err
	}
	defer c.Destroy(context.WithoutCancel(ctx), src)
	rep := &SnapshotReport{WorkspaceFiles: files}
	logf("snapshot scenario: generating a %d-file workspace", files)
	t0 := time.Now()
	res, err := c.Exec(ctx, src, api.ExecRequest{Command: fmt.Sprintf(generator, files), TimeoutMs: 600000})
	if err != nil || res.ExitCode != 0 {
		return nil, fmt.Errorf("generate workspace: %+v %v", res, err)
	}
	rep.CreateFromZero = ms(time.Since(t0))
	fmt.Sscan(res.Stdout, &rep.WorkspaceBytes)

	t0 = time.Now()
	sn, err := c.Snapshot(ctx, src, api.SnapshotRequest{Name: "bench"})
	if err != nil {
		return nil, err
	}
	rep.Snapshot, rep.Freeze, rep.SnapshotBytes = ms(time.Since(t0)), sn.FreezeMs, sn.SizeBytes
	defer c.DeleteSnapshot(context.WithoutCancel(ctx), sn.ID)

	// The first restore on this host, which took the snapshot: the layer
	// is its adopted frozen copy (docs/ARCHITECTURE.md, "Snapshot layers
	// as mounted images"), so no blob is read. Another host verifies,
	// decodes and images the blob (go test ./snapshot -bench CacheLayer).
	dst := src + "-r"
	t0 = time.Now()
	if _, _, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: dst, Snapshot: sn.ID, Instance: o.Instance}); err != nil {
		return nil, err
	}
	if r, err := c.Exec(ctx, dst, api.ExecRequest{Argv: []string{"test", "-f", "/home/user/ws/node_modules/pkg0/lib/m0.js"}}); err != nil || r.ExitCode != 0 {
		return nil, fmt.Errorf("restored workspace: %+v %v", r, err)
	}
	rep.Restore = ms(time.Since(t0))
	c.Destroy(context.WithoutCancel(ctx), dst)
	// A second restore finds the layer unpacked on this host already.
	t0 = time.Now()
	if _, _, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: dst, Snapshot: sn.ID, Instance: o.Instance}); err != nil {
		return nil, err
	}
	if r, err := c.Exec(ctx, dst, api.ExecRequest{Argv: []string{"test", "-f", "/home/user/ws/node_modules/pkg0/lib/m0.js"}}); err != nil || r.ExitCode != 0 {
		return nil, fmt.Errorf("restored workspace: %+v %v", r, err)
	}
	rep.RestoreWarm = ms(time.Since(t0))
	c.Destroy(context.WithoutCancel(ctx), dst)

	t0 = time.Now()
	fr, err := c.Fork(ctx, src, api.ForkRequest{Count: 10})
	if err != nil {
		return nil, err
	}
	rep.Fork10 = ms(time.Since(t0))
	for _, s := range fr.Sandboxes {
		c.Destroy(context.WithoutCancel(ctx), s.Name)
	}
	t0 = time.Now()
	fr2, err := c.Fork(ctx, src, api.ForkRequest{Count: 10})
	if err != nil {
		c.DeleteSnapshot(context.WithoutCancel(ctx), fr.Snapshot.ID)
		return nil, err
	}
	rep.Fork10Unchanged = ms(time.Since(t0))
	if fr2.Snapshot.ID != fr.Snapshot.ID {
		logf("snapshot scenario: the second fork took a new snapshot %s (the source changed?)", fr2.Snapshot.ID)
	}
	for _, s := range fr2.Sandboxes {
		c.Destroy(context.WithoutCancel(ctx), s.Name)
	}
	c.DeleteSnapshot(context.WithoutCancel(ctx), fr2.Snapshot.ID)
	c.DeleteSnapshot(context.WithoutCancel(ctx), fr.Snapshot.ID)

	// Baseline: tar | zstd of the same tree on the host.
	if o.DataDir != "" && os.Geteuid() == 0 {
		sb, err := c.Get(ctx, src)
		if err == nil {
			upper := filepath.Join(o.DataDir, "uppers", sb.ID, "upper")
			t0 = time.Now()
			cmd := exec.CommandContext(ctx, "sh", "-c", "tar -C \"$1\" -cf - . | zstd -q -1 -T0 > /dev/null", "sh", upper)
			if err := cmd.Run(); err == nil {
				v := ms(time.Since(t0))
				rep.TarZstd = &v
				rep.SnapshotVsTar = ratio(rep.Snapshot, v)
			}
		}
	}
	rep.RestoreVsCreate = ratio(rep.Restore, rep.CreateFromZero)
	return rep, nil
}

func ms(d time.Duration) float64 { return round(float64(d.Microseconds()) / 1000) }
