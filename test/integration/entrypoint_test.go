//go:build integration

package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/durable"
)

// TestContainerEntrypointIsTheProcess: the entrypoint argv is the
// container's main process itself, not a shell that runs it, so a signal
// reaches it first and Monitor reports how it ended: an entrypoint that
// handles SIGTERM and exits 3 is reported as 3, not as the 143 of a
// wrapper shell killed by the same signal.
func TestContainerEntrypointIsTheProcess(t *testing.T) {
	pr, _ := startProbeProgram(t)
	t.Cleanup(func() { pr.stop() }) // the program running at the end
	ctx := context.Background()
	c := pr.c
	id := fmt.Sprintf("it-ep-%d", time.Now().UnixNano()%1e6)
	call := func(method string, args, out any) error { return c.CallObject(ctx, "Probe", id, method, args, out) }
	var name string
	if err := call("Name", nil, &name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy(context.Background(), name) })
	if err := call("Start", map[string]any{"image": "debian-trixie",
		"entrypoint": []string{"sh", "-c", "trap 'exit 3' TERM; echo $$ > /tmp/entrypoint-pid; while :; do sleep 0.1; done"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("SetTimeout", map[string]int{"Seconds": 600}, nil); err != nil {
		t.Fatal(err)
	}
	var pid string
	for deadline := time.Now().Add(20 * time.Second); ; {
		res, err := c.Exec(ctx, name, api.ExecRequest{Command: "cat /tmp/entrypoint-pid"})
		if err == nil && strings.TrimSpace(res.Stdout) != "" {
			pid = strings.TrimSpace(res.Stdout)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entrypoint did not run: %+v %v", res, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The shell of the entrypoint argv is the recorded process.
	ps, err := c.ListProcesses(ctx, name, "")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range ps {
		if p.ID == "entrypoint" {
			found = true
			if strconv.Itoa(p.PID) != pid {
				t.Errorf("entrypoint record pid %d, but the entrypoint's shell is pid %s", p.PID, pid)
			}
		}
	}
	if !found {
		t.Fatalf("no entrypoint process in %+v", ps)
	}
	if err := call("Signal", map[string]int{"Signal": 15}, nil); err != nil {
		t.Fatal(err)
	}
	var info durable.ExitInfo
	if err := call("Monitor", nil, &info); err != nil || info.ExitCode != 3 || info.Reason != "sleeping" {
		t.Fatalf("monitor (entrypoint exits 3 on SIGTERM): %+v %v", info, err)
	}
}
