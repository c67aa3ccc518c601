package snapshot

import (
	"encoding/hex"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// This file holds the cache's small on-disk records and the checks on the
// names that become paths in it.

func validID(id string) error {
	if id == "" || len(id) > 128 || id == "." || id == ".." {
		return errdefs.InvalidArgument("invalid snapshot id %q", id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return errdefs.InvalidArgument("invalid snapshot id %q", id)
		}
	}
	return nil
}

func validSHA(s string) (string, error) {
	s = strings.ToLower(strings.TrimPrefix(s, "sha256:"))
	if len(s) != 64 {
		return "", errdefs.InvalidArgument("invalid sha256 %q", s)
	}
	if _, err := hex.DecodeString(s); err != nil {
		return "", errdefs.InvalidArgument("invalid sha256 %q", s)
	}
	return s, nil
}

func readSum(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// writeFileSync replaces p with content atomically and durably.
func writeFileSync(p, content string) error {
	tmp := p + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func syncfs(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}
