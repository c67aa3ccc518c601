package egress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"
)

// Where the CA goes inside a sandbox's root filesystem.
const (
	// CAFileInSandbox is the CA alone (Debian's local CA directory, so a
	// later update-ca-certificates keeps it in the bundle).
	CAFileInSandbox = "/usr/local/share/ca-certificates/berth-egress-ca.crt"
	// BundleInSandbox is the system bundle the CA is appended to.
	BundleInSandbox = "/etc/ssl/certs/ca-certificates.crt"

	maxBundle = 16 << 20
)

// SandboxEnv is the environment that points TLS clients at the bundle
// (OpenSSL-based tools, python requests) and node at the CA.
func SandboxEnv() map[string]string {
	return map[string]string{
		"SSL_CERT_FILE":       BundleInSandbox,
		"REQUESTS_CA_BUNDLE":  BundleInSandbox,
		"CURL_CA_BUNDLE":      BundleInSandbox,
		"NODE_EXTRA_CA_CERTS": CAFileInSandbox,
	}
}

// InstallCA writes the CA into the sandbox root filesystem at rootfs (its
// writable layer): CAFileInSandbox, and appended to BundleInSandbox unless
// it is there already. The tree belongs to the sandbox, so every path is
// resolved inside it (filepath-securejoin's pathrs: symlinks, absolute
// ones included, resolve within the root; the last component is opened
// without following links): nothing planted in the image or by the
// sandbox can make the host write outside it.
func (m *Manager) InstallCA(rootfs string) error {
	if err := installCA(rootfs, m.ca.CertPEM()); err != nil {
		return fmt.Errorf("install egress CA: %w", err)
	}
	return nil
}

func installCA(rootfs string, pemCA []byte) error {
	root, err := os.OpenFile(rootfs, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := writeNew(root, CAFileInSandbox, pemCA); err != nil {
		return err
	}
	h, err := pathrs.OpenatInRoot(root, BundleInSandbox)
	if errors.Is(err, os.ErrNotExist) {
		return writeNew(root, BundleInSandbox, pemCA)
	}
	if err != nil {
		return err
	}
	defer h.Close()
	st, err := h.Stat()
	if err != nil {
		return err
	}
	// The sandbox may have replaced the bundle with a FIFO, a device or a
	// huge file: only a regular file of sane size is read.
	if !st.Mode().IsRegular() || st.Size() > maxBundle {
		return fmt.Errorf("%s is not a regular file under %d bytes", BundleInSandbox, maxBundle)
	}
	// Read-only first: on overlayfs opening for write copies the file up
	// into the sandbox's layer (and into its next snapshot).
	old, err := readHandle(h)
	if err != nil {
		return err
	}
	if bytes.Contains(old, bytes.TrimSpace(pemCA)) {
		return nil
	}
	f, err := pathrs.Reopen(h, unix.O_WRONLY|unix.O_CLOEXEC)
	if err != nil {
		return err
	}
	defer f.Close()
	var add []byte
	if len(old) > 0 && old[len(old)-1] != '\n' {
		add = append(add, '\n')
	}
	add = append(add, pemCA...)
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return err
	}
	_, err = f.Write(add)
	return err
}

func readHandle(h *os.File) ([]byte, error) {
	f, err := pathrs.Reopen(h, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxBundle))
}

// writeNew writes data to file p inside root, creating its directory,
// unless the file already holds exactly data. A symlink or other
// non-regular file in its place is replaced.
func writeNew(root *os.File, p string, data []byte) error {
	if h, err := pathrs.OpenatInRoot(root, p); err == nil {
		st, serr := h.Stat()
		same := false
		if serr == nil && st.Mode().IsRegular() && st.Size() == int64(len(data)) {
			if cur, err := readHandle(h); err == nil && bytes.Equal(cur, data) {
				same = true
			}
		}
		h.Close()
		if same {
			return nil
		}
	}
	dir, err := pathrs.MkdirAllHandle(root, path.Dir(p), 0o755)
	if err != nil {
		return err
	}
	defer dir.Close()
	name := path.Base(p)
	open := func() (int, error) {
		return unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o644)
	}
	fd, err := open()
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EISDIR) {
		_ = unix.Unlinkat(int(dir.Fd()), name, 0)
		fd, err = open()
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	_, err = f.Write(data)
	return err
}
