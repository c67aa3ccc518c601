//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// readEvents reads GET /v1/events?sandbox=name&after=after until want
// events arrived or the deadline passed.
func readEvents(t *testing.T, name, after string, want int) []api.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+d.listen+"/v1/events?sandbox="+name+"&after="+after, nil)
	req.Header.Set("Authorization", "Bearer "+readKey(t))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET /v1/events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var out []api.Event
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() && len(out) < want {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev api.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			out = append(out, ev)
		}
	}
	return out
}

// The lifecycle of a real sandbox, as GET /v1/events tells it: created,
// started, slept, woke, destroyed, once each and in order; resuming after
// an event's id gives only what came after it.
func TestEventsFollowTheLifecycle(t *testing.T) {
	ctx := context.Background()
	name := "it-events"
	if _, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: name, Sleep: api.SleepStop}); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Sleep(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	want := []string{api.EventCreated, api.EventStarted, api.EventSlept, api.EventWoke, api.EventDestroyed}
	evs := readEvents(t, name, "0", len(want))
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Type)
		if ev.Sandbox != name {
			t.Fatalf("?sandbox=%s streamed an event of %q", name, ev.Sandbox)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v, want %v", got, want)
	}
	// Resume after the sleep: only the wake and the destroy.
	rest := readEvents(t, name, evs[2].ID, 2)
	if len(rest) != 2 || rest[0].Type != api.EventWoke || rest[1].Type != api.EventDestroyed || rest[0].ID != evs[3].ID {
		t.Fatalf("resumed after %s: %+v", evs[2].ID, rest)
	}
}
