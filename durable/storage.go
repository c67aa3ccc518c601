package durable

import (
	"context"
	"encoding/json"
	"sort"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// MaxKeyBytes and MaxValueBytes bound one storage entry.
const (
	MaxKeyBytes   = 2048
	MaxValueBytes = 1 << 20
)

// Storage is one object's transactional key-value storage. Values are any
// JSON-encodable Go value. Every Put and Delete is its own committed
// transaction; use Transaction to change several keys at once.
type Storage struct {
	st     store.Objects
	object string
}

// Entry is one listed key with its raw JSON value; decode it with
// json.Unmarshal or Entry.Decode.
type Entry struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// Decode unmarshals the entry's value into v.
func (e Entry) Decode(v any) error { return json.Unmarshal(e.Value, v) }

// ListOptions select keys: those starting with Prefix, from Start
// (inclusive) on, at most Limit (0: all).
type ListOptions struct {
	Prefix string
	Start  string
	Limit  int
}

func checkKey(k string) error {
	if k == "" || len(k) > MaxKeyBytes {
		return errdefs.InvalidArgument("storage key must be 1 to %d bytes", MaxKeyBytes)
	}
	return nil
}

func encode(k string, v any) ([]byte, error) {
	if err := checkKey(k); err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, errdefs.InvalidArgument("storage value for %q is not JSON-encodable: %w", k, err)
	}
	if len(b) > MaxValueBytes {
		return nil, errdefs.InvalidArgument("storage value for %q is %d bytes (limit %d)", k, len(b), MaxValueBytes)
	}
	return b, nil
}

// Get decodes the value of key into v and reports whether it existed.
func (s *Storage) Get(ctx context.Context, key string, v any) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	b, ok, err := s.st.ObjectGet(ctx, s.object, key)
	if err != nil || !ok {
		return false, err
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			return true, errdefs.InvalidArgument("storage value for %q does not decode into %T: %w", key, v, err)
		}
	}
	return true, nil
}

// Put stores v under key.
func (s *Storage) Put(ctx context.Context, key string, v any) error {
	b, err := encode(key, v)
	if err != nil {
		return err
	}
	return s.st.ObjectCommit(ctx, s.object, []store.ObjectWrite{{Key: key, Value: b}})
}

// Delete removes key; removing a missing key is not an error.
func (s *Storage) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return s.st.ObjectCommit(ctx, s.object, []store.ObjectWrite{{Key: key, Delete: true}})
}

// List returns entries in key order.
func (s *Storage) List(ctx context.Context, o ListOptions) ([]Entry, error) {
	kvs, err := s.st.ObjectList(ctx, s.object, o.Prefix, o.Start, o.Limit)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(kvs))
	for i, kv := range kvs {
		out[i] = Entry{Key: kv.Key, Value: kv.Value}
	}
	return out, nil
}

// DeleteAll removes every key and the alarm.
func (s *Storage) DeleteAll(ctx context.Context) error { return s.st.ObjectDeleteAll(ctx, s.object) }

// Transaction runs fn with a Tx and commits its writes all or nothing:
// if fn returns an error nothing is written, and if the daemon dies while
// committing (even by kill -9) the store holds either all or none of the
// writes. Reads inside fn see the transaction's own writes. Because calls
// to one object are serialized and only the object writes its storage,
// fn sees no concurrent writer.
func (s *Storage) Transaction(ctx context.Context, fn func(tx *Tx) error) error {
	tx := &Tx{s: s, ctx: ctx, writes: map[string]*store.ObjectWrite{}}
	if err := fn(tx); err != nil {
		return err
	}
	tx.done = true
	if len(tx.writes) == 0 {
		return nil
	}
	keys := make([]string, 0, len(tx.writes))
	for k := range tx.writes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ws := make([]store.ObjectWrite, len(keys))
	for i, k := range keys {
		ws[i] = *tx.writes[k]
	}
	return s.st.ObjectCommit(ctx, s.object, ws)
}

// Tx is an open storage transaction. Its writes are buffered and applied
// by Transaction in one store transaction.
type Tx struct {
	s      *Storage
	ctx    context.Context
	writes map[string]*store.ObjectWrite
	done   bool
}

func (t *Tx) check() error {
	if t.done {
		return errdefs.FailedPrecondition("transaction already finished")
	}
	return nil
}

// Get reads key, seeing this transaction's writes.
func (t *Tx) Get(key string, v any) (bool, error) {
	if err := t.check(); err != nil {
		return false, err
	}
	if w, ok := t.writes[key]; ok {
		if w.Delete {
			return false, nil
		}
		if v != nil {
			return true, json.Unmarshal(w.Value, v)
		}
		return true, nil
	}
	return t.s.Get(t.ctx, key, v)
}

// Put buffers a write of v under key.
func (t *Tx) Put(key string, v any) error {
	if err := t.check(); err != nil {
		return err
	}
	b, err := encode(key, v)
	if err != nil {
		return err
	}
	t.writes[key] = &store.ObjectWrite{Key: key, Value: b}
	return nil
}

// Delete buffers the removal of key.
func (t *Tx) Delete(key string) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	t.writes[key] = &store.ObjectWrite{Key: key, Delete: true}
	return nil
}

// List lists committed entries merged with this transaction's writes.
func (t *Tx) List(o ListOptions) ([]Entry, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	base, err := t.s.List(t.ctx, ListOptions{Prefix: o.Prefix, Start: o.Start})
	if err != nil {
		return nil, err
	}
	m := map[string]json.RawMessage{}
	for _, e := range base {
		m[e.Key] = e.Value
	}
	for k, w := range t.writes {
		if !strings.HasPrefix(k, o.Prefix) || k < o.Start {
			continue
		}
		if w.Delete {
			delete(m, k)
		} else {
			m[k] = w.Value
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if o.Limit > 0 && len(keys) > o.Limit {
		keys = keys[:o.Limit]
	}
	out := make([]Entry, len(keys))
	for i, k := range keys {
		out[i] = Entry{Key: k, Value: m[k]}
	}
	return out, nil
}
