package agent

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// LogMax bounds the agent's log file (its stderr, the bundle's agent.log on
// the host, outside the sandbox's disk quota). Sandbox users can make the
// agent log (every sudo call is a line), so without a cap they could grow a
// host file without limit.
const LogMax = 4 << 20

// CappedLog is the agent's log writer. While its file is a regular file it
// keeps it at most max bytes: a write that would pass max truncates the
// file in place and starts it again with a marker and the newest keep bytes
// written before (the one rotated generation; the agent cannot rename a
// file it only holds an fd of). Writes to anything else (a terminal, a
// pipe) pass through. The file's size is read from the file, so other
// writers (runc, a previous run of the agent appending) count too.
type CappedLog struct {
	mu        sync.Mutex
	f         *os.File
	max, keep int64
	tail      []byte // the newest ≤ keep bytes written
	rotations int
}

// NewCappedLog caps f at max bytes, keeping max/8 across a rotation.
func NewCappedLog(f *os.File, max int64) *CappedLog {
	return &CappedLog{f: f, max: max, keep: max / 8}
}

func (l *CappedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var st unix.Stat_t
	if err := unix.Fstat(int(l.f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return l.f.Write(p)
	}
	n := len(p)
	if lim := l.max / 2; int64(len(p)) > lim {
		p = append(p[:lim:lim], "…[line truncated]\n"...)
	}
	if st.Size+int64(len(p)) > l.max {
		l.rotations++
		tail := l.tail
		if over := int64(len(tail)) - l.keep; over > 0 {
			tail = tail[over:]
		}
		marker := fmt.Sprintf("berth-agent: log reached %d bytes: rotated in place (%d); the last %d bytes before it follow\n", st.Size, l.rotations, len(tail))
		if err := unix.Ftruncate(int(l.f.Fd()), 0); err != nil {
			return 0, err // never grow past the cap
		}
		// The fd is O_APPEND (runtime.OCI.Create), so writes land at the
		// new end; Seek for a file opened without it.
		l.f.Seek(0, 0)
		l.f.Write(append([]byte(marker), tail...))
	}
	if _, err := l.f.Write(p); err != nil {
		return 0, err
	}
	// Trimmed only at twice keep, so a flood costs amortised O(1) a byte.
	l.tail = append(l.tail, p...)
	if over := int64(len(l.tail)) - l.keep; over > l.keep {
		l.tail = append(l.tail[:0:0], l.tail[over:]...)
	}
	return n, nil
}

// maxLoggedArgv bounds how much of a command line the agent logs.
const maxLoggedArgv = 512

// logLimitsOff is set by DisableLogLimits.
var logLimitsOff bool

// DisableLogLimits makes logArgv log whole command lines: the agent's
// --no-log-cap, the negative control of the adversarial suite's
// agent-log-cap switch. Never used otherwise.
func DisableLogLimits() { logLimitsOff = true }

// logArgv quotes argv for a log line, cut to maxLoggedArgv bytes with the
// full length noted.
func logArgv(argv []string) string {
	s := fmt.Sprintf("%q", argv)
	if len(s) <= maxLoggedArgv || logLimitsOff {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:maxLoggedArgv], len(s))
}
