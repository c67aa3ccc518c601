package local

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/blob/fs"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store"
)

// TestRestoreExpiredBackup (issue 12 item 13): restoring a backup past its
// TTL says that it expired and when, with its own code (410), not "not
// found"; another tenant still learns nothing; an expired backup can be
// deleted.
func TestRestoreExpiredBackup(t *testing.T) {
	r := newRig(t)
	blobs, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r.cfg.Blobs = blobs
	r.m = newAttached(t, r.cfg)
	exp := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	if err := r.cfg.Store.PutBackup(ctx, store.Backup{ID: "bkp_old", Sandbox: "a", Dir: "/home/user/x",
		CreatedAt: exp.Add(-time.Hour), ExpiresAt: exp, Tenant: "t1"}); err != nil {
		t.Fatal(err)
	}
	_, err = r.m.RestoreBackup(ctx, "bkp_old", api.RestoreBackupRequest{Sandbox: "a"})
	if !errors.Is(err, errdefs.ErrExpired) || errdefs.Code(err) != "expired" || api.HTTPStatus(err) != http.StatusGone {
		t.Fatalf("restore of an expired backup: %v (code %s, status %d)", err, errdefs.Code(err), api.HTTPStatus(err))
	}
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "expired at "+exp.Format(time.RFC3339)) {
		t.Fatalf("the error should refine failed precondition and say when: %v", err)
	}
	// Across the wire the kind survives.
	body := api.ErrorBody(err)
	if w := body.Err(); !errors.Is(w, errdefs.ErrExpired) {
		t.Fatalf("wire round trip: %+v -> %v", body, w)
	}
	other := policy.WithTenant(ctx, "t2")
	if _, err := r.m.RestoreBackup(other, "bkp_old", api.RestoreBackupRequest{Sandbox: "a"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("another tenant's expired backup: %v", err)
	}
	if _, err := r.m.RestoreBackup(ctx, "bkp_none", api.RestoreBackupRequest{Sandbox: "a"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a missing backup: %v", err)
	}
	if err := r.m.DeleteBackup(ctx, "bkp_old"); err != nil {
		t.Fatalf("delete an expired backup: %v", err)
	}
	if _, err := r.m.RestoreBackup(ctx, "bkp_old", api.RestoreBackupRequest{Sandbox: "a"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// TestTarCounter: the count a backup records is what a restore reports as
// files: every entry but directories.
func TestTarCounter(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	add(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "a.txt", Typeflag: tar.TypeReg, Mode: 0o644}, strings.Repeat("x", 100000))
	add(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "d/" + strings.Repeat("long", 60), Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX}, "y")
	add(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "a.txt"}, "")
	add(&tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "a.txt"}, "")
	tw.Close()
	c := newTarCounter()
	if _, err := io.Copy(c, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if n := c.close(); n != 4 {
		t.Fatalf("counted %d files, want 4", n)
	}
	// A stream that is not a tar never blocks the writer.
	c = newTarCounter()
	if _, err := io.Copy(c, bytes.NewReader(bytes.Repeat([]byte("junk"), 100000))); err != nil {
		t.Fatal(err)
	}
	c.close()
}
