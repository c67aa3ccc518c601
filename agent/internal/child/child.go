package child

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
)

// ReadChunk is the size of one read of a child's output pipe (at most
// wire.MaxOutput, so one read fits one frame).
const ReadChunk = 32 << 10

// MaxTimeoutMs is the longest run a request may ask for: 30 days.
const MaxTimeoutMs = 30 * 24 * 3600 * 1000

// Command is a program resolved the way an exec is resolved: the program
// found on PATH, the environment, the working directory and the user.
type Command struct {
	Argv0  string
	Argv   []string
	Env    []string
	Dir    string
	User   string // the user's name
	UID    uint32
	GID    uint32
	Groups []uint32
}

// Exit is how a child of the agent ended. Lost is set when its status was
// taken by someone else (only possible when the reaper does not reap every
// child).
type Exit struct {
	Status syscall.WaitStatus
	Lost   bool
}

// DrainDelay is how long an exec waits after the command exits for EOF on
// its pipes, for background processes that keep its stdout open. After it,
// what the pipes hold is still read and forwarded (ReadPipe), then the exec
// ends and they keep running, writing into a closed pipe. A variable only
// so that a test can shrink the window to make the race it bounds
// deterministic.
var DrainDelay = 250 * time.Millisecond

// ExitStatus is how a wait status reads in the API: a signal is exit code
// 128+N and its name.
func ExitStatus(ws syscall.WaitStatus) api.ExitStatus {
	if ws.Signaled() {
		return api.ExitStatus{ExitCode: 128 + int(ws.Signal()), Signal: unix.SignalName(ws.Signal())}
	}
	return api.ExitStatus{ExitCode: ws.ExitStatus()}
}
