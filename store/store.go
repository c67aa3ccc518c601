package store

import (
	"context"
	"time"

	"github.com/berth-sh/berth/api"
)

// Sandbox is the persisted record of one named sandbox. The controller is
// the only writer; Version implements optimistic concurrency so that two
// daemons (or a bug) can never silently overwrite each other.
type Sandbox struct {
	Name        string
	ID          string // stable per name lifetime; names the container, netns, upper dir
	State       string // api.State*
	Image       string // what the user asked for
	ImageDigest string // what it runs (set at first start, kept after)
	Instance    string
	Resources   api.Resources
	Internet    bool
	Env         map[string]string
	Labels      map[string]string
	SleepAfter  time.Duration
	KeepAlive   bool
	IP          string
	Error       string
	OOMKilled   bool
	CreatedAt   time.Time
	StartedAt   time.Time // zero when not running
	LastActive  time.Time
	SleepAt     time.Time // the sleepAfter alarm; zero when none is armed
	Version     int64     // bumped by every Put; 0 for a new record

	// Snapshot is the snapshot the sandbox was created from; Chain is the
	// full list of snapshot layers under its upper, lowest first (so a
	// wake never needs the snapshot records, which may have expired).
	Snapshot string
	Chain    []Layer
	// Persist is api.PersistNone, api.PersistDisk or api.PersistInterval
	// (disk plus checkpoints while running). With disk, every
	// sleep snapshots the upper to the blob store (PersistSnapshot), so a
	// host without the local layer can wake the sandbox from it.
	Persist         string
	PersistSnapshot string
	// PersistEvery is the checkpoint period of api.PersistInterval, and
	// LastCheckpoint when the newest checkpoint was stored.
	PersistEvery   time.Duration `json:",omitempty"`
	LastCheckpoint time.Time     `json:",omitempty"`

	// RunID names the current run of the compute (a new one each start);
	// preview URLs are bound to the run they were made in.
	RunID string
	// Ports are the exposed ports (preview URLs), by port number.
	Ports map[int]Exposure
	// Network is the egress policy; nil means {Internet: Internet}.
	Network *api.NetworkPolicy `json:",omitempty"`
	// Tenant owns the sandbox (operator policy); "" for the daemon's own
	// API key.
	Tenant string `json:",omitempty"`

	// HostUID is the first host uid (and gid) of the sandbox's user
	// namespace range: sandbox id k runs as host id HostUID+k. 0 means not
	// allocated yet (allocated at first start, kept for the record's life).
	HostUID uint32
	// Volumes are the named volumes mounted at each start (package
	// volume), fixed at creation.
	Volumes []api.VolumeMount `json:",omitempty"`
	// Start is the start command run at every boot from files (fixed at
	// creation).
	Start *api.StartCommand `json:",omitempty"`
	// Isolation is api.IsolationRunc or api.IsolationGVisor ("" = runc).
	Isolation string
	// Sleep is the sleep mode (api.Sleep*; "" = api.SleepStop, as every
	// record made before tiers were). SleepTier is the tier a sleeping
	// sandbox sleeps in ("" when it runs), FrozenAt when the freeze tier
	// began, LastWake how the last wake went (api.Sandbox.LastWake).
	Sleep     string    `json:",omitempty"`
	SleepTier string    `json:",omitempty"`
	FrozenAt  time.Time `json:",omitempty"`
	LastWake  string    `json:",omitempty"`
	// SelfSleep: its controller object sleeps it from its own alarm
	// (durable.StartOptions.SelfSleep); the controller's idle timer skips it.
	SelfSleep bool `json:",omitempty"`
	// ExitCode is the exit code of the run's entrypoint process once it
	// ended (durable.StartOptions.Entrypoint); nil while it runs, when
	// there is none, and after the next start.
	ExitCode *int `json:",omitempty"`

	// Owner is the node that runs (or last ran) the sandbox in a cluster,
	// and OwnerEpoch the epoch of the sandbox lease ("sandbox/NAME") under
	// which it does: a node writes the record only while both are its own,
	// so a node that comes back after it was declared dead cannot. Both
	// are empty on a single host.
	Owner      string `json:",omitempty"`
	OwnerEpoch int64  `json:",omitempty"`
}

// Exposure is one exposed port of a sandbox.
type Exposure struct {
	Port      int
	Name      string
	Token     string
	Private   bool
	RunID     string
	CreatedAt time.Time
}

// Layer names one snapshot layer by id and blob digest.
type Layer struct {
	ID     string
	SHA256 string
}

// JournalEntry records one lifecycle operation. Key is an idempotency key:
// appending an entry whose key already exists is a no-op that returns
// ErrAlreadyExists, so a retried operation can detect it already ran.
type JournalEntry struct {
	Seq     int64
	Sandbox string
	Op      string // create, start, sleep, wake, destroy, reconcile, ...
	Key     string
	Detail  string
	At      time.Time

	// Set for operations recorded with Ops.Begin: the arguments (JSON,
	// secrets redacted), the outcome and when it finished.
	Args     string
	Status   string // OpPending, OpDone, OpFailed; "" for plain Append
	Result   string
	Error    string
	Finished time.Time
}

// Store is the controller's state store.
type Store interface {
	// Get returns the record for name, or an errdefs not-found error.
	Get(ctx context.Context, name string) (Sandbox, error)
	// List returns all records ordered by name.
	List(ctx context.Context) ([]Sandbox, error)
	// Put inserts (Version 0) or updates a record. An update succeeds only
	// if the stored Version equals sb.Version; it returns the new Version.
	// A mismatch is an errdefs failed-precondition error; inserting an
	// existing name is already-exists.
	Put(ctx context.Context, sb Sandbox) (int64, error)
	// Delete removes the record; deleting a missing name is not an error.
	Delete(ctx context.Context, name string) error
	// DueAlarms returns records whose SleepAt is set and not after now.
	DueAlarms(ctx context.Context, now time.Time) ([]Sandbox, error)
	// Append adds a journal entry (see JournalEntry for Key semantics).
	Append(ctx context.Context, e JournalEntry) error
	// Journal returns the entries for one sandbox, oldest first.
	Journal(ctx context.Context, sandbox string) ([]JournalEntry, error)
	// JournalAfter returns up to limit entries of every stream whose Seq
	// is greater than afterSeq, oldest (lowest Seq) first: the feed that
	// lifecycle events and webhooks read (package events). limit <= 0
	// means a default of 1000.
	JournalAfter(ctx context.Context, afterSeq int64, limit int) ([]JournalEntry, error)
	Artifacts
	Objects
	Ops
	Volumes
	Close() error
}

// Snapshot is an immutable filesystem layer captured from a sandbox. Its
// record is written only after its blob is complete, so a snapshot that is
// listed can always be restored (unless the blob store loses it).
type Snapshot struct {
	ID                string
	Name              string
	Sandbox           string // the sandbox it was taken from
	SizeBytes         int64  // compressed blob size
	UncompressedBytes int64
	Files             int64
	SHA256            string // hex digest of the blob
	BaseImageDigest   string
	Parent            string // the snapshot the sandbox was restored from, if any
	Depth             int    // 1 + parent's depth; bounded by squashing
	FreezeMs          float64
	// Chain is every layer a restore mounts, lowest first, ending with
	// this snapshot's own layer.
	Chain     []Layer
	TTL       time.Duration // renewed on every restore
	CreatedAt time.Time
	ExpiresAt time.Time
	Tenant    string `json:",omitempty"` // the sandbox's tenant when taken
}

// Backup is a compressed archive of one directory of a sandbox.
type Backup struct {
	ID        string
	Name      string
	Sandbox   string
	Dir       string
	SizeBytes int64
	SHA256    string
	Files     int64
	CreatedAt time.Time
	ExpiresAt time.Time
	Tenant    string `json:",omitempty"` // the sandbox's tenant when taken
}

// Artifacts stores snapshot and backup records. Gets of missing or expired
// records are errdefs not-found errors, except GetBackup of an expired
// backup: errdefs.ErrExpired, with the record (its tenant decides who may
// learn that it existed).
type Artifacts interface {
	PutSnapshot(ctx context.Context, s Snapshot) error
	GetSnapshot(ctx context.Context, id string) (Snapshot, error)
	// ListSnapshots filters by sandbox and name when they are not empty.
	ListSnapshots(ctx context.Context, sandbox, name string) ([]Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
	// TouchSnapshot moves a snapshot's expiry (TTL renewal on restore).
	TouchSnapshot(ctx context.Context, id string, expiresAt time.Time) error
	// ExpiredSnapshots lists snapshots whose expiry is not after now.
	ExpiredSnapshots(ctx context.Context, now time.Time) ([]Snapshot, error)

	PutBackup(ctx context.Context, b Backup) error
	GetBackup(ctx context.Context, id string) (Backup, error)
	ListBackups(ctx context.Context, sandbox string) ([]Backup, error)
	DeleteBackup(ctx context.Context, id string) error
}

// Secrets keeps named secrets for credential injection. Values are only
// ever read by the egress proxy on the host; the API never returns them.
type Secrets interface {
	PutSecret(ctx context.Context, name, value string) error
	// GetSecret returns a secret's value, or an errdefs not-found error.
	GetSecret(ctx context.Context, name string) (string, error)
	// ListSecrets returns names and update times, ordered by name.
	ListSecrets(ctx context.Context) ([]SecretInfo, error)
	// DeleteSecret removes a secret; a missing name is not found.
	DeleteSecret(ctx context.Context, name string) error
}

// SecretInfo describes a secret without its value.
type SecretInfo struct {
	Name      string
	UpdatedAt time.Time
}
