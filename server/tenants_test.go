package server

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store/sqlite"
)

// whoami is an Objects that answers with the caller's tenant.
type whoami struct{}

func (whoami) CallObject(ctx context.Context, class, id, method string, args json.RawMessage) (json.RawMessage, error) {
	return json.Marshal("tenant=" + policy.TenantFrom(ctx))
}
func (whoami) ObjectJournalName(ctx context.Context, class, id string) string { return id }

// TestTenantKeys: a tenant's key authenticates and puts the tenant into
// the request's context; the daemon's own key has no tenant; an unknown
// key is refused.
func TestTenantKeys(t *testing.T) {
	s := newServer(newFake(), Options{APIKey: testKey, Objects: whoami{}, Tenants: func(k string) (string, bool) {
		return "team-a", k == "key-of-team-a-0123"
	}})
	ts := httptest.NewServer(s)
	defer ts.Close()
	for _, c := range []struct{ key, want string }{
		{testKey, `"tenant="`},
		{"key-of-team-a-0123", `"tenant=team-a"`},
	} {
		r := do(t, ts, "POST", "/v1/objects/X/1/Who", nil, "Authorization", "Bearer "+c.key)
		if r.status != 200 || strings.TrimSpace(string(r.body)) != c.want {
			t.Errorf("key %s: %d %s, want %s", c.key, r.status, r.body, c.want)
		}
	}
	if r := do(t, ts, "POST", "/v1/objects/X/1/Who", nil, "Authorization", "Bearer key-of-team-b-0123"); r.status != 401 {
		t.Fatalf("unknown key: %d", r.status)
	}
}

// TestObjectsArePerTenant: two tenants and the operator calling the same
// (class, id) reach three different objects; each sees its own journal.
func TestObjectsArePerTenant(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := durable.NewHost(durable.Config{Store: st})
	if err := h.Register("Counter", (*counter)(nil), func(s *durable.State) (any, error) { return &counter{st: s}, nil }); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{"key-of-team-a-0123": "team-a", "key-of-team-b-0123": "team-b"}
	ts := httptest.NewServer(newServer(newFake(), Options{APIKey: testKey, Objects: h, Journal: st, Tenants: func(k string) (string, bool) {
		t, ok := keys[k]
		return t, ok
	}}))
	defer ts.Close()
	for _, key := range []string{"key-of-team-a-0123", "key-of-team-a-0123", "key-of-team-b-0123", testKey} {
		do(t, ts, "POST", "/v1/objects/Counter/shared/Add", strings.NewReader(`{"N":1}`), "Authorization", "Bearer "+key)
	}
	want := map[string]string{"key-of-team-a-0123": "2", "key-of-team-b-0123": "1", testKey: "1"}
	for key, n := range want {
		r := do(t, ts, "POST", "/v1/objects/Counter/shared/Add", strings.NewReader(`{"N":0}`), "Authorization", "Bearer "+key)
		if strings.TrimSpace(string(r.body)) != n {
			t.Errorf("%s sees %s, want %s", keys[key], r.body, n)
		}
		r = do(t, ts, "GET", "/v1/objects/Counter/shared/journal", nil, "Authorization", "Bearer "+key)
		var j []api.JournalEntry
		if err := json.Unmarshal(r.body, &j); err != nil || r.status != 200 {
			t.Fatalf("journal: %d %s", r.status, r.body)
		}
		calls, _ := strconv.Atoi(n)
		if len(j) != calls+1 {
			t.Errorf("%s's journal has %d entries, want %d", keys[key], len(j), calls+1)
		}
	}
}
