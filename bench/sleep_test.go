package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// TestFreezerTimes reads the freeze and thaw times from a journal, past
// the API calls' own entries; a wake that rebooted, or a sleep that was
// not a freeze, is an error (a figure must not count a fallback).
func TestFreezerTimes(t *testing.T) {
	var journal []api.JournalEntry
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(journal)
	}))
	defer srv.Close()
	c := client.New(srv.URL, "k")
	e := func(op, detail string) api.JournalEntry { return api.JournalEntry{Op: op, Detail: detail} }
	journal = []api.JournalEntry{
		e("sleep", "requested (freeze in 9.0 ms)"), // an older round
		e("sleep", "requested (freeze in 1.4 ms)"),
		e("sleep", "POST /v1/sandboxes/x/sleep"),
		e("wake", "thaw in 0.2 ms (agent checked in 0.8 ms)"),
		e("exec", "POST /v1/sandboxes/x/exec"),
	}
	f, th, ta, err := freezerTimes(context.Background(), c, "x")
	if err != nil || f != 1400*time.Microsecond || th != 200*time.Microsecond || ta != 800*time.Microsecond {
		t.Fatalf("times: %v %v %v %v", f, th, ta, err)
	}
	for _, bad := range [][]api.JournalEntry{
		{e("sleep", "requested (freeze in 1.4 ms)"), e("reboot", "thaw: boom; boots from its files"), e("wake", "started")},
		{e("sleep", "requested (freeze failed: stopped)"), e("wake", "thaw in 0.2 ms (agent checked in 0.8 ms)")},
		{e("exec", "POST /v1/sandboxes/x/exec")},
	} {
		journal = bad
		if _, _, _, err := freezerTimes(context.Background(), c, "x"); err == nil || !strings.Contains(err.Error(), "x:") {
			t.Fatalf("journal %+v: err %v, want an error", bad, err)
		}
	}
}
