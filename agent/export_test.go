package agent

import (
	"time"

	"github.com/berth-sh/berth/agent/internal/child"
)

// SetExtractConfinementForTest turns layers of the restore extractor's
// confinement off for negative controls and returns a func that restores
// them. noChecks drops the name and parent checks; noRoot drops os.Root.
func SetExtractConfinementForTest(noChecks, noRoot bool) func() {
	extractNoChecks, extractNoRoot = noChecks, noRoot
	return func() { extractNoChecks, extractNoRoot = false, false }
}

// SetDrainDelayForTest shortens the wait for EOF after a command exits
// (child.DrainDelay) and returns a func that restores it. A tiny delay stands in
// for a reader that is not scheduled in time on a loaded machine.
func SetDrainDelayForTest(d time.Duration) func() {
	old := child.DrainDelay
	child.DrainDelay = d
	return func() { child.DrainDelay = old }
}
