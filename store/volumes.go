package store

import (
	"context"
	"time"
)

// Volume is a named volume: data that exists apart from any sandbox (a
// btrfs subvolume with a quota on its node, package volume).
type Volume struct {
	Name string
	// SizeBytes is the quota: writes past it fail inside the sandbox.
	SizeBytes int64
	// Snapshot marks a read-only snapshot: it is mounted read-only only,
	// and never changes after it is taken.
	Snapshot bool `json:",omitempty"`
	// Origin is the volume a snapshot or fork was taken from ("" for one
	// made empty).
	Origin string `json:",omitempty"`
	// Writer is the sandbox (by name) that mounts the volume read-write,
	// "" when none does: one writer at a time.
	Writer string `json:",omitempty"`
	// Readers are the sandboxes (by name) that mount it read-only.
	Readers []string `json:",omitempty"`
	// Node is where the volume's data lives (the single-host part: the
	// node that made it).
	Node      string `json:",omitempty"`
	Tenant    string `json:",omitempty"`
	CreatedAt time.Time
	Version   int64 // bumped by every PutVolume; 0 for a new record
}

// Volumes stores volume records. Writes are conditional on Version like
// Put's, so two sandboxes racing for a volume's one writer slot never
// both win.
type Volumes interface {
	// GetVolume returns the record or an errdefs not-found error.
	GetVolume(ctx context.Context, name string) (Volume, error)
	// ListVolumes returns all records ordered by name.
	ListVolumes(ctx context.Context) ([]Volume, error)
	// PutVolume inserts (Version 0; an existing name is already-exists)
	// or updates (the stored Version must equal v.Version, else failed
	// precondition) and returns the new Version.
	PutVolume(ctx context.Context, v Volume) (int64, error)
	// DeleteVolume removes the record if its Version is still version
	// (else failed precondition); a missing name is not an error.
	DeleteVolume(ctx context.Context, name string, version int64) error
}
