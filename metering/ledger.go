package metering

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/store"
)

// objectPrefix starts the store object of a tenant's usage records. Its
// class part holds a '.', which no durable-object class name can
// (durable's nameRE), so it never meets a user object's storage.
const objectPrefix = "berth.usage/"

// noTenant stands for the sandboxes of no tenant (the operator's own).
const noTenant = "~"

// hourKey is the key layout: the hour (sorts by time), then the node.
const hourKey = "2006-01-02T15"

func objectOf(tenant string) string {
	if tenant == "" {
		tenant = noTenant
	}
	return objectPrefix + tenant
}

type ledgerKey struct {
	tenant string
	hour   time.Time
}

// ledger keeps this node's hourly usage records and writes them to the
// store.
type ledger struct {
	st   store.Objects
	node string

	mu    sync.Mutex
	recs  map[ledgerKey]*api.UsageRecord
	dirty map[ledgerKey]bool
}

func newLedger(st store.Objects, node string) *ledger {
	return &ledger{st: st, node: node, recs: map[ledgerKey]*api.UsageRecord{}, dirty: map[ledgerKey]bool{}}
}

func (l *ledger) key(k ledgerKey) string { return k.hour.Format(hourKey) + "/" + l.node }

// add adds d to tenant's record of the hour of now, loading the record
// from the store the first time (a restarted daemon adds to it).
func (l *ledger) add(ctx context.Context, tenant string, now time.Time, d api.UsageRecord, logf func(string, ...any)) {
	k := ledgerKey{tenant, now.UTC().Truncate(time.Hour)}
	l.mu.Lock()
	r := l.recs[k]
	l.mu.Unlock()
	if r == nil {
		r = &api.UsageRecord{Tenant: tenant, Node: l.node, Start: k.hour}
		if l.st != nil {
			b, ok, err := l.st.ObjectGet(ctx, objectOf(tenant), l.key(k))
			switch {
			case err != nil:
				logf("metering: load usage of %q: %v", tenant, err)
			case ok:
				_ = json.Unmarshal(b, r)
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.recs[k]; cur != nil {
		r = cur // loaded meanwhile by another round
	}
	*r = sum(*r, d)
	l.recs[k] = r
	l.dirty[k] = true
	// Records of past hours are written and forgotten.
	for old := range l.recs {
		if old.hour.Before(k.hour.Add(-time.Hour)) && !l.dirty[old] {
			delete(l.recs, old)
		}
	}
}

// flush writes the records that changed since the last flush.
func (l *ledger) flush(ctx context.Context, logf func(string, ...any)) {
	if l.st == nil {
		return
	}
	l.mu.Lock()
	by := map[string][]store.ObjectWrite{}
	var done []ledgerKey
	for k := range l.dirty {
		b, _ := json.Marshal(l.recs[k])
		by[k.tenant] = append(by[k.tenant], store.ObjectWrite{Key: l.key(k), Value: b})
		done = append(done, k)
	}
	l.dirty = map[ledgerKey]bool{}
	l.mu.Unlock()
	failed := map[string]bool{}
	for tenant, ws := range by {
		if err := l.st.ObjectCommit(ctx, objectOf(tenant), ws); err != nil {
			logf("metering: write usage of %q: %v", tenant, err)
			failed[tenant] = true
		}
	}
	if len(failed) > 0 {
		l.mu.Lock()
		for _, k := range done {
			if failed[k.tenant] {
				l.dirty[k] = true // the next round tries again
			}
		}
		l.mu.Unlock()
	}
}

// list reads tenant's records of every node for the hours in [from, to).
func (l *ledger) list(ctx context.Context, tenant string, from, to time.Time) ([]api.UsageRecord, error) {
	out := []api.UsageRecord{}
	if l.st == nil {
		return out, nil
	}
	from = from.UTC().Truncate(time.Hour)
	kvs, err := l.st.ObjectList(ctx, objectOf(tenant), "", from.Format(hourKey), 0)
	if err != nil {
		return nil, fmt.Errorf("usage records: %w", err)
	}
	for _, kv := range kvs {
		h, _, _ := strings.Cut(kv.Key, "/")
		t, err := time.Parse(hourKey, h)
		if err != nil || !t.Before(to) {
			continue
		}
		var r api.UsageRecord
		if json.Unmarshal(kv.Value, &r) == nil {
			r.Tenant = tenant
			out = append(out, r)
		}
	}
	return out, nil
}
