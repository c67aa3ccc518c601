package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/api"
)

// TestExecNoLostOutputUnderLoad runs thousands of short execs concurrently
// while CPU hogs keep both the agent's threads and its children waiting for
// a CPU, with the drain window shrunk to 1 ms so that a reader scheduled
// late is the common case rather than one in 100,000 (issue 12 E: `echo
// TOKEN` answered 200, exit 0 and empty stdout). Every exec must return
// exactly its token.
func TestExecNoLostOutputUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test")
	}
	defer agent.SetDrainDelayForTest(time.Millisecond)()
	_, c := newClient(t)

	// Hogs: busy processes competing for the CPUs, and busy goroutines
	// competing for the agent's own Ps.
	hogs := runtime.NumCPU() * 2
	for i := 0; i < hogs; i++ {
		cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	stop := make(chan struct{})
	var hogWG sync.WaitGroup
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		hogWG.Add(1)
		go func() {
			defer hogWG.Done()
			x := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				for j := 0; j < 1e5; j++ {
					x += j
				}
			}
		}()
	}
	defer func() { close(stop); hogWG.Wait() }()

	const total, workers = 3000, 48
	var next, lost, failed atomic.Int64
	var firstBad atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				want := fmt.Sprintf("TOKEN-%d\n", i)
				var out, errb bytes.Buffer
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				// argv form (no shell) and shell form alternate.
				req := api.ExecRequest{Command: "echo TOKEN-" + fmt.Sprint(i)}
				if i%2 == 0 {
					req = api.ExecRequest{Argv: []string{"echo", "TOKEN-" + fmt.Sprint(i)}}
				}
				st, err := c.Exec(ctx, req, &out, &errb)
				cancel()
				switch {
				case err != nil:
					failed.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprintf("exec %d: %v", i, err))
				case out.String() != want || st.ExitCode != 0:
					lost.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprintf("exec %d: stdout %q, status %+v", i, out.String(), st))
				}
			}
		}()
	}
	wg.Wait()
	if lost.Load() > 0 || failed.Load() > 0 {
		t.Fatalf("%d of %d execs lost output, %d failed; first: %v", lost.Load(), total, failed.Load(), firstBad.Load())
	}
}
