package events

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// opTypes names the journal ops that are lifecycle events. The ops are
// node/local's (m.journal) and the cluster's (daemon: move, takeover are
// not events). A start command that could not start (start-command-
// failed) is not one either: the sandbox runs, and its journal says why.
var opTypes = map[string]string{
	"create":        api.EventCreated,
	"start":         api.EventStarted,
	"wake":          api.EventWoke,
	"sleep":         api.EventSlept,
	"snapshot":      api.EventSnapshotted,
	"fork":          api.EventForked,
	"destroy":       api.EventDestroyed,
	"create-failed": api.EventFailed,
	"start-failed":  api.EventFailed,
	"compute-lost":  api.EventFailed,
	"oom-killed":    api.EventOOMKilled,
}

// apiRecord reports whether e is the API's record of a call
// (server/journal.go: detail "METHOD /path"): the node's own entry for
// the same step is the event, so a call is never counted twice.
func apiRecord(e store.JournalEntry) bool {
	m, rest, ok := strings.Cut(e.Detail, " ")
	if !ok || !strings.HasPrefix(rest, "/") {
		return false
	}
	switch m {
	case "GET", "POST", "PUT", "PATCH", "DELETE":
		return true
	}
	return false
}

// Map turns one journal entry into an event; ok is false for entries that
// are no lifecycle event. Tenant is left empty (Feed fills it in).
func Map(e store.JournalEntry) (ev api.Event, ok bool) {
	typ, ok := opTypes[e.Op]
	if e.Op == "reconcile" && strings.Contains(e.Detail, "compute lost") {
		// Reconcile found the container gone (a host reboot, a kill).
		typ, ok = api.EventFailed, true
	}
	if !ok || e.Sandbox == "" || strings.Contains(e.Sandbox, ":") || apiRecord(e) {
		// ':' is in no sandbox name: node streams ("node:NAME").
		return api.Event{}, false
	}
	detail := e.Detail
	if e.Status == store.OpFailed && e.Error != "" {
		detail = strings.TrimSpace(detail + " " + e.Error)
	}
	return api.Event{ID: strconv.FormatInt(e.Seq, 10), Type: typ, Sandbox: e.Sandbox, At: e.At.UTC(), Op: e.Op, Detail: detail}, true
}

// Source is what Feed reads: the state store.
type Source interface {
	JournalAfter(ctx context.Context, afterSeq int64, limit int) ([]store.JournalEntry, error)
	Get(ctx context.Context, name string) (store.Sandbox, error)
}

// DefaultGapGrace is how long Feed waits for a hole in the sequence to
// fill (see Feed.GapGrace).
const DefaultGapGrace = 3 * time.Second

// Feed reads lifecycle events from the journal. It is safe for concurrent
// use.
type Feed struct {
	src Source
	// GapGrace: PostgreSQL hands out sequence numbers before commit, so
	// a reader can see seq 6 before seq 5 commits. Feed stops before a
	// hole whose next entry is younger than GapGrace (the hole may yet
	// fill) and passes it once older (a rolled-back insert, a pruned
	// entry). SQLite commits in sequence order; the hold costs it at
	// most GapGrace after a duplicate-key append.
	GapGrace time.Duration
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time

	mu      sync.Mutex
	tenants map[string]tenantOf // the last record seen of each name

	head     atomic.Int64 // the newest seq read so far (Head pages from it)
	stopOnce sync.Once
	done     chan struct{}
}

// Stop tells the feed's readers to end (Done is closed): the daemon stops
// it when it shuts down, so open event streams end instead of holding the
// HTTP server's graceful shutdown until its timeout.
func (f *Feed) Stop() { f.stopOnce.Do(func() { close(f.done) }) }

// Done is closed by Stop.
func (f *Feed) Done() <-chan struct{} { return f.done }

type tenantOf struct {
	tenant  string
	created time.Time
}

// maxTenantCache bounds Feed's memory of names; past it the memory starts
// over (a destroyed sandbox's later events then carry no tenant).
const maxTenantCache = 100000

// NewFeed returns a feed over src.
func NewFeed(src Source) *Feed {
	return &Feed{src: src, GapGrace: DefaultGapGrace, tenants: map[string]tenantOf{}, done: make(chan struct{})}
}

func (f *Feed) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// After returns the events after journal seq after, oldest first, from at
// most limit entries (limit <= 0: 500), and next, the seq to read after
// the next time: the last entry it passed, event or not. next == after
// when nothing new is readable yet.
func (f *Feed) After(ctx context.Context, after int64, limit int) (evs []api.Event, next int64, err error) {
	if limit <= 0 {
		limit = 500
	}
	ents, err := f.src.JournalAfter(ctx, after, limit)
	if err != nil {
		return nil, after, err
	}
	next = after
	for _, e := range ents {
		if e.Seq != next+1 && next != 0 && f.now().Sub(e.At) < f.GapGrace {
			break // a hole that may still fill: wait for it
		}
		next = e.Seq
		f.seen(e.Seq)
		ev, ok := Map(e)
		if !ok {
			continue
		}
		ev.Tenant = f.tenant(ctx, e)
		evs = append(evs, ev)
	}
	return evs, next, nil
}

// Head returns the seq of the newest entry (0 for an empty journal): where
// a reader without a cursor starts to see only what comes next.
// It pages from the newest seq this feed has seen, so only the first call
// reads the whole journal.
func (f *Feed) Head(ctx context.Context) (int64, error) {
	head := f.head.Load()
	for {
		ents, err := f.src.JournalAfter(ctx, head, 5000)
		if err != nil {
			return 0, err
		}
		if len(ents) == 0 {
			f.seen(head)
			return head, nil
		}
		head = ents[len(ents)-1].Seq
	}
}

// seen records seq as read, for Head.
func (f *Feed) seen(seq int64) {
	for {
		h := f.head.Load()
		if seq <= h || f.head.CompareAndSwap(h, seq) {
			return
		}
	}
}

// createdSlack allows for the journal's millisecond times and for clock
// skew between cluster members when a record's CreatedAt is compared with
// an entry's time.
const createdSlack = time.Second

// tenant is the tenant of e's sandbox: its record's, unless the record is
// of a later sandbox of that name; else the last record seen of the name.
func (f *Feed) tenant(ctx context.Context, e store.JournalEntry) string {
	rec, err := f.src.Get(ctx, e.Sandbox)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		if !rec.CreatedAt.IsZero() && rec.CreatedAt.After(e.At.Add(createdSlack)) {
			// A later sandbox of the same name: not this entry's.
			if t, ok := f.tenants[e.Sandbox]; ok && !t.created.After(e.At) {
				return t.tenant
			}
			return ""
		}
		if len(f.tenants) >= maxTenantCache {
			f.tenants = map[string]tenantOf{}
		}
		f.tenants[e.Sandbox] = tenantOf{tenant: rec.Tenant, created: rec.CreatedAt}
		return rec.Tenant
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		// A store error: no guess, the event carries no tenant.
		return ""
	}
	if t, ok := f.tenants[e.Sandbox]; ok && !t.created.After(e.At) {
		return t.tenant
	}
	return ""
}
