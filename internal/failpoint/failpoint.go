//go:build berthtest

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Enabled reports whether this build carries failpoints (the berthtest
// build tag). Tests that need one skip without it.
const Enabled = true

var (
	once   sync.Once
	points map[string]string
)

func load() {
	points = map[string]string{}
	for _, kv := range strings.Split(os.Getenv("BERTH_FAILPOINTS"), ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k != "" {
			points[k] = v
		}
	}
}

// Hit triggers the failpoint named step if one is configured.
func Hit(step string) {
	once.Do(load)
	if len(points) == 0 {
		return
	}
	switch points[step] {
	case "exit":
		fmt.Fprintf(os.Stderr, "berth: failpoint %s: exiting\n", step)
		os.Exit(137)
	case "kill9":
		// A real SIGKILL from the process to itself: nothing runs after
		// this, not even the runtime's exit path.
		fmt.Fprintf(os.Stderr, "berth: failpoint %s: kill -9\n", step)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
