package e2b

import (
	"net/http"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestPauseKeepsProcessTableWhenFrozen: a pause that freezes keeps the
// API's process table (the processes continue after the thaw, so List and
// Connect must still find them); the negative control, a pause that stops,
// drops it.
func TestPauseKeepsProcessTableWhenFrozen(t *testing.T) {
	for _, c := range []struct {
		mode string
		keep bool
	}{{api.SleepFreeze, true}, {api.SleepStop, false}} {
		e := setup(t)
		e.f.mu.Lock()
		sb := e.f.sbs[e.id]
		sb.Sleep = c.mode
		e.f.sbs[e.id] = sb
		e.f.mu.Unlock()
		e.h.procs.add(e.id, &procEntry{pid: 4242, agentID: "p-1"})
		res := e.control(http.MethodPost, "/sandboxes/"+e.id+"/pause", "{}", testKey)
		res.Body.Close()
		if res.StatusCode != http.StatusNoContent {
			t.Fatalf("%s: pause: %d", c.mode, res.StatusCode)
		}
		if got := len(e.h.procs.list(e.id)); (got == 1) != c.keep {
			t.Fatalf("%s: %d process entries after the pause, keep=%v", c.mode, got, c.keep)
		}
	}
}
