package local

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"github.com/berth-sh/berth/internal/weaken"
)

// weakReadFile is the files-confine negative control (BERTH_TEST_WEAKEN=
// files-confine, tests only): it reads the sandbox's writable layer on the
// host with a plain path join, the CVE-2018-15664 bug class, so the
// adversarial suite can show its symlink-exchange racer would catch a
// host-side resolver. It reports ok=false when the switch is off. The
// control plane asks it first (control.Plane.ReadFile).
func (m *Manager) WeakReadFile(ctx context.Context, name, path string) (io.ReadCloser, bool, error) {
	if !weaken.Off(weaken.FilesConfine) {
		return nil, false, nil
	}
	sb, err := m.describe(ctx, name)
	if err != nil {
		return nil, true, err
	}
	f, err := os.Open(filepath.Join(m.cfg.Rootfs.UpperDir(sb.ID), path))
	return f, true, err
}
