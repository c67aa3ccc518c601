package api

import (
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Persist modes for a sandbox's files across sleep.
const (
	PersistNone = "none" // the writable layer stays on this host's disk only
	PersistDisk = "disk" // on sleep it is also snapshotted to the blob store
	// PersistInterval is disk plus a checkpoint of the running sandbox's
	// files every PersistEvery, which bounds what the loss of its node
	// costs (in a cluster it wakes elsewhere from the newest checkpoint).
	PersistInterval = "interval"
)

// SnapshotRequest takes a snapshot of a sandbox. TTL is a Go duration
// ("72h"); default 720h (30 days). It is renewed on every restore.
type SnapshotRequest struct {
	Name string `json:"name,omitempty"`
	TTL  string `json:"ttl,omitempty"`
}

// Snapshot is an immutable filesystem layer of a sandbox.
type Snapshot struct {
	ID                string    `json:"id"`
	Name              string    `json:"name,omitempty"`
	Sandbox           string    `json:"sandbox"`
	SizeBytes         int64     `json:"sizeBytes"`
	UncompressedBytes int64     `json:"uncompressedBytes"`
	Files             int64     `json:"files"`
	SHA256            string    `json:"sha256"`
	BaseImageDigest   string    `json:"baseImageDigest"`
	Parent            string    `json:"parent,omitempty"`
	Depth             int       `json:"depth"`
	FreezeMs          float64   `json:"freezeMs"`
	CreatedAt         time.Time `json:"createdAt"`
	ExpiresAt         time.Time `json:"expiresAt"`
}

// SnapshotList is the body of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// ForkRequest makes Count new sandboxes from one fresh snapshot of a source.
// Names, when given, must have Count entries; otherwise forks are named
// <source>-fork-<n>.
type ForkRequest struct {
	Count int      `json:"count"`
	Names []string `json:"names,omitempty"`
}

// ForkResult lists the new sandboxes and the snapshot they share.
type ForkResult struct {
	Snapshot  Snapshot  `json:"snapshot"`
	Sandboxes []Sandbox `json:"sandboxes"`
}

// BackupRequest archives one directory of a sandbox into the blob store.
type BackupRequest struct {
	Dir       string   `json:"dir"`
	Name      string   `json:"name,omitempty"`
	TTL       string   `json:"ttl,omitempty"` // default 72h
	Exclude   []string `json:"exclude,omitempty"`
	Gitignore bool     `json:"gitignore,omitempty"`
}

// Backup is a stored directory archive.
type Backup struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	Sandbox   string    `json:"sandbox"`
	Dir       string    `json:"dir"`
	SizeBytes int64     `json:"sizeBytes"`
	SHA256    string    `json:"sha256"`
	Files     int64     `json:"files"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// BackupList is the body of GET /v1/backups.
type BackupList struct {
	Backups []Backup `json:"backups"`
}

// RestoreBackupRequest restores a backup into a sandbox (any sandbox), at
// Dir or, when empty, at the directory it was taken from. The directory is
// replaced atomically: a failed restore leaves it as it was.
type RestoreBackupRequest struct {
	Sandbox string `json:"sandbox"`
	Dir     string `json:"dir,omitempty"`
}

// RestoreBackupResult reports what a restore wrote.
type RestoreBackupResult struct {
	Dir   string `json:"dir"`
	Files int64  `json:"files"`
	Bytes int64  `json:"bytes"`
}

// Bounds of PersistEvery: a checkpoint freezes the sandbox for a moment
// and uploads its changed files, so not more often than every 10 s.
const (
	MinPersistEvery = 10 * time.Second
	MaxPersistEvery = 24 * time.Hour
)

// ParsePersistEvery checks a create's persist mode and checkpoint period
// together: the period is required with PersistInterval, refused with any
// other mode, and bounded. It returns the period (0 without interval).
func ParsePersistEvery(persist, every string) (time.Duration, error) {
	if persist != PersistInterval {
		if every != "" {
			return 0, errdefs.InvalidArgument("persistEvery %q goes with persist %q only (persist is %q)", every, PersistInterval, persist)
		}
		return 0, nil
	}
	d, err := time.ParseDuration(every)
	if every == "" || err != nil || d < MinPersistEvery || d > MaxPersistEvery {
		return 0, errdefs.InvalidArgument("persist %q needs persistEvery, a duration between %s and %s like \"10m\"; got %q", PersistInterval, MinPersistEvery, MaxPersistEvery, every)
	}
	return d, nil
}
