package local

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/tenant"
	"github.com/berth-sh/berth/store"
)

func backupToAPI(b store.Backup) api.Backup {
	return api.Backup{ID: b.ID, Name: b.Name, Sandbox: b.Sandbox, Dir: b.Dir, SizeBytes: b.SizeBytes,
		SHA256: b.SHA256, Files: b.Files, CreatedAt: b.CreatedAt, ExpiresAt: b.ExpiresAt}
}

// CreateBackup implements control.Snapshots. The agent writes the tar
// inside the sandbox (so no host code resolves a sandbox path); the host
// compresses it with zstd and streams it into the blob store.
func (m *Manager) CreateBackup(ctx context.Context, name string, req api.BackupRequest) (api.Backup, error) {
	if m.cfg.Blobs == nil {
		return api.Backup{}, errdefs.FailedPrecondition("backups need a blob store; this daemon has none configured")
	}
	if req.Dir == "" {
		return api.Backup{}, errdefs.InvalidArgument("backup needs dir")
	}
	ttl, err := parseTTL(req.TTL, defaultBackupTTL)
	if err != nil {
		return api.Backup{}, err
	}
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return api.Backup{}, err
	}
	defer release()
	rc, err := ag.ReadArchive(ctx, req.Dir, agentclient.ArchiveOptions{Exclude: req.Exclude, Gitignore: req.Gitignore})
	if err != nil {
		return api.Backup{}, err
	}
	defer rc.Close()
	id := newArtifactID("bkp_")
	var raw, files int64
	st, err := m.upload(ctx, backupKey(id), func(w io.Writer) (CaptureStats, error) {
		enc, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2))
		if err != nil {
			return CaptureStats{}, err
		}
		tc := newTarCounter()
		n, err := io.Copy(enc, io.TeeReader(rc, tc))
		raw, files = n, tc.close()
		if cerr := enc.Close(); err == nil {
			err = cerr
		}
		return CaptureStats{UncompressedBytes: n}, err
	})
	if err != nil {
		return api.Backup{}, fmt.Errorf("backup of %s in %q: %w", req.Dir, name, err)
	}
	now := time.Now().UTC()
	b := store.Backup{ID: id, Name: req.Name, Sandbox: name, Dir: req.Dir, SizeBytes: st.CompressedBytes,
		SHA256: st.SHA256, Files: files, CreatedAt: now, ExpiresAt: now.Add(ttl), Tenant: tenant.From(ctx)}
	if rec, err := m.st.Get(ctx, name); err == nil {
		b.Tenant = rec.Tenant // the sandbox's owner, also when the operator takes it
	}
	if err := m.st.PutBackup(ctx, b); err != nil {
		_ = m.cfg.Blobs.Delete(context.WithoutCancel(ctx), backupKey(id))
		return api.Backup{}, err
	}
	m.journal(ctx, name, "backup", fmt.Sprintf("%s %s (%d files, %d bytes raw)", id, req.Dir, files, raw))
	return backupToAPI(b), nil
}

// ListBackups implements control.Snapshots.
func (m *Manager) ListBackups(ctx context.Context, sandbox string) ([]api.Backup, error) {
	list, err := m.st.ListBackups(ctx, sandbox)
	if err != nil {
		return nil, err
	}
	out := make([]api.Backup, 0, len(list))
	for _, b := range list {
		if mayUse(ctx, b.Tenant) {
			out = append(out, backupToAPI(b))
		}
	}
	return out, nil
}

// DeleteBackup implements control.Snapshots.
func (m *Manager) DeleteBackup(ctx context.Context, id string) error {
	// An expired backup can still be deleted (its blob goes with it).
	if b, err := m.getBackup(ctx, id); err != nil && !errdefs.IsKind(err, errdefs.ErrExpired) {
		return err
	} else if !mayUse(ctx, b.Tenant) {
		return errdefs.NotFound("backup %s not found", id)
	}
	if err := m.st.DeleteBackup(ctx, id); err != nil {
		return err
	}
	if m.cfg.Blobs != nil {
		if err := m.cfg.Blobs.Delete(ctx, backupKey(id)); err != nil {
			m.cfg.Logf("delete backup blob %s: %v", id, err)
		}
	}
	return nil
}

// getBackup is the store's backup record as the caller may see it: one
// of another tenant is not found, expired or not; an expired one of the
// caller's is errdefs.ErrExpired, saying when (410), with its record.
func (m *Manager) getBackup(ctx context.Context, id string) (store.Backup, error) {
	b, err := m.st.GetBackup(ctx, id)
	if err != nil && !errdefs.IsKind(err, errdefs.ErrExpired) {
		return store.Backup{}, err
	}
	if !mayUse(ctx, b.Tenant) {
		return store.Backup{}, errdefs.NotFound("backup %s not found", id)
	}
	return b, err
}

// hashingReader fails its final read when the bytes do not match want, so
// the agent sees a broken stream and keeps the old directory.
type hashingReader struct {
	r    io.Reader
	h    io.Writer
	sum  func() string
	want string
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	if err == io.EOF && h.sum() != h.want {
		return n, errdefs.Internal("backup blob is corrupt: sha256 mismatch")
	}
	return n, err
}

// RestoreBackup implements control.Snapshots. The agent extracts into a
// staging dir and swaps it in only when the whole archive arrived intact,
// so a failed restore leaves the target as it was.
func (m *Manager) RestoreBackup(ctx context.Context, id string, req api.RestoreBackupRequest) (api.RestoreBackupResult, error) {
	if m.cfg.Blobs == nil {
		return api.RestoreBackupResult{}, errdefs.FailedPrecondition("backups need a blob store; this daemon has none configured")
	}
	b, err := m.getBackup(ctx, id)
	if err != nil {
		return api.RestoreBackupResult{}, err
	}
	dir := req.Dir
	if dir == "" {
		dir = b.Dir
	}
	ag, release, err := m.use(ctx, req.Sandbox)
	if err != nil {
		return api.RestoreBackupResult{}, err
	}
	defer release()
	rc, _, err := m.cfg.Blobs.Get(ctx, backupKey(id))
	if err != nil {
		return api.RestoreBackupResult{}, fmt.Errorf("backup %s: %w", id, err)
	}
	defer rc.Close()
	h := sha256.New()
	hr := &hashingReader{r: rc, h: h, want: b.SHA256, sum: func() string { return hex.EncodeToString(h.Sum(nil)) }}
	dec, err := zstd.NewReader(hr, zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxMemory(256<<20))
	if err != nil {
		return api.RestoreBackupResult{}, err
	}
	defer dec.Close()
	res, err := ag.WriteArchive(ctx, dir, dec.IOReadCloser(), "")
	if err != nil {
		return api.RestoreBackupResult{}, fmt.Errorf("restore backup %s into %q:%s: %w", id, req.Sandbox, dir, err)
	}
	m.journal(ctx, req.Sandbox, "restore-backup", id+" "+dir)
	return api.RestoreBackupResult{Dir: dir, Files: res.Files, Bytes: res.Bytes}, nil
}

// tarCounter counts the non-directory entries (regular files, symlinks,
// hard links: what a restore reports as files) of the tar written to it.
type tarCounter struct {
	pw   *io.PipeWriter
	done chan int64
}

func newTarCounter() *tarCounter {
	pr, pw := io.Pipe()
	c := &tarCounter{pw: pw, done: make(chan int64, 1)}
	go func() {
		var n int64
		tr := tar.NewReader(pr)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if h.Typeflag != tar.TypeDir {
				n++
			}
		}
		// Whatever follows (or a stream tar cannot read) is drained, so
		// the writer never blocks.
		_, _ = io.Copy(io.Discard, pr)
		c.done <- n
	}()
	return c
}

func (c *tarCounter) Write(p []byte) (int, error) { return c.pw.Write(p) }

// close ends the stream and returns the count.
func (c *tarCounter) close() int64 {
	c.pw.Close()
	return <-c.done
}
