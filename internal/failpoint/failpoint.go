package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

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
	if points[step] == "exit" {
		fmt.Fprintf(os.Stderr, "berth: failpoint %s: exiting\n", step)
		os.Exit(137)
	}
}
