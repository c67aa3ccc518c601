package api

import (
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Volume is a named volume: data that lives apart from any sandbox. One
// sandbox at a time may mount it read-write (Writer); any number may mount
// it, or its snapshots, read-only (Readers). A snapshot (Snapshot set) is
// a read-only copy as of the moment it was taken; a fork is a new writable
// volume that starts as a copy. Both are copy-on-write.
type Volume struct {
	Name      string    `json:"name"`
	SizeBytes int64     `json:"sizeBytes"`          // the quota
	UsedBytes int64     `json:"usedBytes"`          // charged to the quota (-1 when unknown)
	Snapshot  bool      `json:"snapshot,omitempty"` // a read-only snapshot
	Origin    string    `json:"origin,omitempty"`   // the volume it was snapshotted or forked from
	Writer    string    `json:"writer,omitempty"`   // the sandbox mounting it read-write
	Readers   []string  `json:"readers,omitempty"`  // sandboxes mounting it read-only
	Node      string    `json:"node,omitempty"`     // where its data lives
	CreatedAt time.Time `json:"createdAt"`
}

// VolumeList is the body of GET /v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes"`
}

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	Name string `json:"name"`
	// SizeBytes is the quota; 0 means DefaultVolumeSize.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
}

// VolumeSnapshotRequest is the body of POST /v1/volumes/{name}/snapshot.
type VolumeSnapshotRequest struct {
	Name string `json:"name"` // the snapshot's name (a volume name)
}

// VolumeForkRequest is the body of POST /v1/volumes/{name}/fork.
type VolumeForkRequest struct {
	Name string `json:"name"` // the new volume's name
	// SizeBytes is the fork's quota; 0 keeps the source's.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
}

// VolumeMount mounts a volume into a sandbox at Path. A snapshot can only
// be mounted read-only.
type VolumeMount struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Volume sizes.
const (
	DefaultVolumeSize int64 = 1 << 30
	MinVolumeSize     int64 = 16 << 20 // below it btrfs metadata alone fills the quota
	// MaxVolumeMounts bounds the mounts of one sandbox.
	MaxVolumeMounts = 16
)

var volumeNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidateVolumeName returns an invalid-argument error unless name is a
// valid volume name: it becomes a directory name on the host, so it has no
// '/', is not "." or "..", and has no control characters.
func ValidateVolumeName(name string) error {
	if !volumeNameRE.MatchString(name) || strings.Contains(name, "..") {
		return errdefs.InvalidArgument("invalid volume name %q: use 1-63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit, without \"..\"", name)
	}
	return nil
}

// ValidateVolumeSize checks a quota (0 is the default).
func ValidateVolumeSize(n int64) error {
	if n != 0 && (n < MinVolumeSize || n > 1<<50) {
		return errdefs.InvalidArgument("volume size %d is out of range (%d bytes to 1 PiB)", n, MinVolumeSize)
	}
	return nil
}

// reservedMountPaths are where berth itself mounts things in a sandbox, or
// the kernel's file systems: a volume there or above them would hide or
// replace them.
var reservedMountPaths = []string{"/proc", "/sys", "/dev", "/etc", "/run", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/tmp", "/var/run", "/.berth"}

// ValidateVolumeMounts checks the mounts of a create request: names,
// paths (absolute, clean, no "..", not "/", not under or above a system
// path, no two overlapping) and one mount per volume.
func ValidateVolumeMounts(ms []VolumeMount) error {
	if len(ms) > MaxVolumeMounts {
		return errdefs.InvalidArgument("%d volume mounts, at most %d", len(ms), MaxVolumeMounts)
	}
	seen := map[string]bool{}
	for i, m := range ms {
		if err := ValidateVolumeName(m.Name); err != nil {
			return err
		}
		if seen[m.Name] {
			return errdefs.InvalidArgument("volume %q is mounted twice", m.Name)
		}
		seen[m.Name] = true
		if err := ValidateVolumePath(m.Path); err != nil {
			return err
		}
		for _, o := range ms[:i] {
			if o.Path == m.Path || pathWithin(m.Path, o.Path) || pathWithin(o.Path, m.Path) {
				return errdefs.InvalidArgument("volume mount paths %q and %q overlap", o.Path, m.Path)
			}
		}
	}
	return nil
}

// ValidateVolumePath checks one sandbox-side mount path. Only the form is
// checked here; the node resolves it inside the sandbox's root without
// following symlinks (package volume).
func ValidateVolumePath(p string) error {
	if p == "" || p[0] != '/' {
		return errdefs.InvalidArgument("volume mount path %q is not absolute", p)
	}
	if len(p) > 1024 || strings.ContainsAny(p, "\x00\n\r\t\\,:") {
		return errdefs.InvalidArgument("volume mount path %q has a forbidden character or is too long", p)
	}
	for _, c := range strings.Split(p[1:], "/") {
		if c == ".." || c == "." || c == "" {
			return errdefs.InvalidArgument("volume mount path %q is not clean (no \"..\", \".\" or empty parts)", p)
		}
	}
	if path.Clean(p) != p || p == "/" {
		return errdefs.InvalidArgument("volume mount path %q is not a clean path below /", p)
	}
	for _, r := range reservedMountPaths {
		if p == r || pathWithin(p, r) || pathWithin(r, p) {
			return errdefs.InvalidArgument("volume mount path %q is or contains a system path (%s)", p, r)
		}
	}
	return nil
}

// pathWithin reports whether p is strictly below dir.
func pathWithin(p, dir string) bool {
	return strings.HasPrefix(p, dir+"/")
}
