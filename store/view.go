package store

import "github.com/berth-sh/berth/api"

// View is the record's public view (api.Sandbox) as the inventory lists
// it: what was persisted, without the node's live additions (an OOM kill
// read from a running sandbox's cgroup, in-memory activity).
func (r Sandbox) View() api.Sandbox {
	s := api.Sandbox{
		Name: r.Name, ID: r.ID, State: r.State, Image: r.Image, ImageDigest: r.ImageDigest,
		Instance: r.Instance, Resources: r.Resources, Internet: r.Internet, Env: r.Env,
		Labels: r.Labels, SleepAfter: r.SleepAfter.String(), KeepAlive: r.KeepAlive, IP: r.IP,
		CreatedAt: r.CreatedAt, LastActive: r.LastActive, Error: r.Error, OOMKilled: r.OOMKilled,
		Snapshot: r.Snapshot, Persist: r.Persist, Isolation: r.Isolation, Node: r.Owner,
		Sleep: r.Sleep, LastWake: r.LastWake, Volumes: r.Volumes, Start: r.Start,
	}
	if s.Sleep == "" {
		s.Sleep = api.SleepStop
	}
	if r.State == api.StateSleeping {
		s.SleepTier = r.SleepTier
		if s.SleepTier == "" {
			s.SleepTier = api.SleepStop
		}
		if !r.FrozenAt.IsZero() {
			t := r.FrozenAt
			s.FrozenAt = &t
		}
	}
	if s.Isolation == "" {
		s.Isolation = api.IsolationRunc
	}
	p := api.NetworkPolicy{Internet: r.Internet}
	if r.Network != nil {
		p = *r.Network
	}
	p.Allow, p.Deny, p.Inject = orEmpty(p.Allow), orEmpty(p.Deny), orEmpty(p.Inject)
	s.Network = &p
	if !r.StartedAt.IsZero() {
		t := r.StartedAt
		s.StartedAt = &t
	}
	if !r.SleepAt.IsZero() {
		t := r.SleepAt
		s.SleepAt = &t
	}
	if r.PersistEvery > 0 {
		s.PersistEvery = r.PersistEvery.String()
	}
	if !r.LastCheckpoint.IsZero() {
		t := r.LastCheckpoint
		s.LastCheckpoint = &t
	}
	return s
}

// orEmpty keeps lists in the view as [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
