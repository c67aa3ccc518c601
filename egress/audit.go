package egress

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"

	"github.com/berth-sh/berth/api"
)

// maxLogFile is where a sandbox's on-disk audit log rotates.
const maxLogFile = 4 << 20

// auditLog is a bounded ring of events, mirrored to an append-only JSON
// lines file when it has a path.
type auditLog struct {
	mu   sync.Mutex
	buf  []api.EgressEvent
	next int
	full bool

	path string // "" keeps the log in memory only
	f    *os.File
	size int64
	logf func(string, ...any)
}

// openAuditLog returns name's log, loading what dir holds for it.
func openAuditLog(dir, name string, n int, logf func(string, ...any)) *auditLog {
	l := &auditLog{buf: make([]api.EgressEvent, n), logf: logf}
	if dir == "" {
		return l
	}
	l.path = filepath.Join(dir, name+".jsonl")
	for _, p := range []string{l.path + ".1", l.path} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			var ev api.EgressEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				l.addMem(ev)
			}
		}
		if st, err := f.Stat(); err == nil && p == l.path {
			l.size = st.Size()
		}
		f.Close()
	}
	return l
}

func (l *auditLog) addMem(ev api.EgressEvent) {
	l.buf[l.next] = ev
	l.next = (l.next + 1) % len(l.buf)
	if l.next == 0 {
		l.full = true
	}
}

func (l *auditLog) add(ev api.EgressEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addMem(ev)
	if l.path == "" {
		return
	}
	if err := l.write(ev); err != nil {
		l.logf("egress audit log %s: %v", l.path, err)
	}
}

func (l *auditLog) write(ev api.EgressEvent) error {
	if l.f == nil {
		if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		l.f = f
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	n, err := l.f.Write(append(b, '\n'))
	l.size += int64(n)
	if err != nil {
		return err
	}
	if l.size > maxLogFile {
		l.f.Close()
		l.f, l.size = nil, 0
		return os.Rename(l.path, l.path+".1")
	}
	return nil
}

func (l *auditLog) tail(limit int) []api.EgressEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := []api.EgressEvent{}
	if l.full {
		all = append(all, l.buf[l.next:]...)
	}
	all = append(all, l.buf[:l.next]...)
	if limit > 0 && len(all) > limit {
		all = all[len(all)-limit:]
	}
	return all
}

func (l *auditLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// remove deletes the log's files (the sandbox is destroyed).
func (l *auditLog) remove() {
	l.close()
	if l.path == "" {
		return
	}
	for _, p := range []string{l.path, l.path + ".1"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.logf("egress audit log: %v", err)
		}
	}
}
