package egress

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const testPEM = "-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n"

func TestInstallCA(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/ssl/certs"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"), []byte("SYSTEM"), 0o644)
	if err := installCA(root, []byte(testPEM)); err != nil {
		t.Fatal(err)
	}
	// Idempotent, and without opening anything for write the second time
	// (on overlayfs that would copy the files up into the sandbox layer).
	ca, bundle := filepath.Join(root, CAFileInSandbox), filepath.Join(root, BundleInSandbox)
	before1, _ := os.Stat(ca)
	before2, _ := os.Stat(bundle)
	time.Sleep(10 * time.Millisecond)
	if err := installCA(root, []byte(testPEM)); err != nil {
		t.Fatal(err)
	}
	after1, _ := os.Stat(ca)
	after2, _ := os.Stat(bundle)
	if !after1.ModTime().Equal(before1.ModTime()) || !after2.ModTime().Equal(before2.ModTime()) {
		t.Fatal("second install rewrote the files")
	}
	b, _ := os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"))
	if string(b) != "SYSTEM\n"+testPEM {
		t.Fatalf("bundle %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, CAFileInSandbox)); string(b) != testPEM {
		t.Fatalf("CA file %q", b)
	}
}

// TestInstallCAStaysInside: a sandbox that swaps its trust store for
// symlinks to host paths (absolute and ../) or a FIFO cannot make the host
// write outside its root or hang. The negative control is the naive
// host-side join, which does write the host file.
func TestInstallCAStaysInside(t *testing.T) {
	outside := t.TempDir()
	canary := filepath.Join(outside, "canary")
	os.WriteFile(canary, []byte("HOST"), 0o644)
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/ssl/certs"), 0o755)
	os.Symlink(canary, filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"))
	// A directory link climbing out of the root: clamped to the root
	// (where it dangles), so the install fails there and writes nothing.
	escape := t.TempDir()
	os.MkdirAll(filepath.Join(escape, "usr/local/share"), 0o755)
	os.Symlink("../../../../../../../../"+outside, filepath.Join(escape, "usr/local/share/ca-certificates"))
	_ = installCA(escape, []byte(testPEM))
	if err := installCA(root, []byte(testPEM)); err != nil {
		t.Fatal(err) // the links resolve inside the root: it works there
	}
	if b, _ := os.ReadFile(canary); string(b) != "HOST" {
		t.Fatalf("host file changed: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("files created outside the root: %v", ents)
	}
	// The link dangled inside the root: it was replaced by a file there.
	if b, err := os.ReadFile(filepath.Join(root, BundleInSandbox)); err != nil || string(b) != testPEM {
		t.Fatalf("bundle inside the root: %q %v", b, err)
	}
	// An absolute link to a bundle elsewhere in the image (as some
	// distributions ship) is followed inside the root.
	abs := t.TempDir()
	os.MkdirAll(filepath.Join(abs, "etc/pki"), 0o755)
	os.MkdirAll(filepath.Join(abs, "etc/ssl/certs"), 0o755)
	os.WriteFile(filepath.Join(abs, "etc/pki/bundle.crt"), []byte("SYS"), 0o644)
	os.Symlink("/etc/pki/bundle.crt", filepath.Join(abs, BundleInSandbox))
	if err := installCA(abs, []byte(testPEM)); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(abs, "etc/pki/bundle.crt")); string(b) != "SYS\n"+testPEM {
		t.Fatalf("linked bundle: %q", b)
	}
	// Negative control: a host-side join follows the same planted link.
	naive := t.TempDir()
	os.MkdirAll(filepath.Join(naive, "etc/ssl/certs"), 0o755)
	os.Symlink(canary, filepath.Join(naive, BundleInSandbox))
	f, err := os.OpenFile(filepath.Join(naive, BundleInSandbox), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("X"))
	f.Close()
	if b, _ := os.ReadFile(canary); !strings.HasSuffix(string(b), "X") {
		t.Fatal("the naive join did not reach the host file: the probe proves nothing")
	}

	// A FIFO in place of the bundle is refused, not read.
	root2 := t.TempDir()
	os.MkdirAll(filepath.Join(root2, "etc/ssl/certs"), 0o755)
	if err := syscall.Mkfifo(filepath.Join(root2, "etc/ssl/certs/ca-certificates.crt"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- installCA(root2, []byte(testPEM)) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("FIFO bundle accepted")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("installCA hung on a FIFO")
	}
}
