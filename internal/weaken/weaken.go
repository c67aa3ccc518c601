//go:build berthtest

package weaken

import (
	"os"
	"sort"
	"strings"
	"sync"
)

// Enabled reports whether this build carries the switches (the berthtest
// build tag). Tests that need a switch skip without it.
const Enabled = true

var (
	once sync.Once
	set  map[string]bool
)

func load() {
	set = map[string]bool{}
	for _, n := range strings.Split(os.Getenv(EnvVar), ",") {
		if n = strings.TrimSpace(n); n != "" {
			set[n] = true
		}
	}
}

// Off reports whether the protection name is switched off for this process.
func Off(name string) bool {
	once.Do(load)
	return set[name]
}

// Active lists the switches that are set, sorted, for the start-up warning.
func Active() []string {
	once.Do(load)
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
