package agent

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/berth-sh/berth/agent/internal/child"
)

// Reaper owns the wait status of every child process the agent starts.
//
// Why a central reaper: as PID 1 the agent inherits every orphan in the
// sandbox and must wait4 them or they stay zombies forever. Reaping with
// wait4(-1) in one goroutine while exec.Cmd.Wait waits for a specific pid in
// another is a race: whichever wait4 runs first takes the status, so
// exec.Cmd.Wait can fail with ECHILD and the exit code of a user's command is
// lost. So the agent never uses os/exec. Instead one goroutine reacts to
// SIGCHLD by looping wait4(-1, WNOHANG) and hands each status to whoever
// registered that pid; statuses of unregistered pids (orphans) are dropped.
//
// A child can exit before its starter has registered the pid. Start therefore
// forks and registers while holding the same lock the reaping loop holds, so
// the loop can only see the pid after it is registered and no early exit is
// ever lost.
//
// When reapAll is false (the agent is embedded in a test process that also
// has other children) the reaper waits only for its registered pids, so it
// never steals statuses from anyone else.
type Reaper struct {
	// CheckFDs checks the agent's descriptors before every start (see
	// checkExecFDs). Set it before the first Start.
	CheckFDs bool

	reapAll bool
	sigs    chan os.Signal
	stop    chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	waiting map[int]chan child.Exit
}

// NewReaper starts a reaper. Create it before starting any child.
func NewReaper(reapAll bool) *Reaper {
	r := &Reaper{
		reapAll: reapAll,
		sigs:    make(chan os.Signal, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		waiting: make(map[int]chan child.Exit),
	}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	go r.loop()
	// Children may have exited before Notify was installed (the agent as
	// PID 1 inherits whatever runc left); sweep once.
	r.reap()
	return r
}

// Stop ends the reaping goroutine.
func (r *Reaper) Stop() {
	signal.Stop(r.sigs)
	close(r.stop)
	<-r.done
}

func (r *Reaper) loop() {
	defer close(r.done)
	for {
		select {
		case <-r.sigs:
			// The signal channel holds at most one pending SIGCHLD, so
			// signals coalesce; reap drains every exited child each time.
			r.reap()
		case <-r.stop:
			return
		}
	}
}

func (r *Reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reapLocked()
}

// reapLocked reaps what has exited and reports whether children remain.
func (r *Reaper) reapLocked() bool {
	var ws syscall.WaitStatus
	if r.reapAll {
		for {
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil { // ECHILD: no children at all
				return false
			}
			if pid <= 0 {
				return true
			}
			r.deliver(pid, ws)
		}
	}
	for pid := range r.waiting {
		for {
			got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if got == pid {
				r.deliver(pid, ws)
			} else if err == syscall.ECHILD {
				// Someone else reaped it; we cannot know how it ended,
				// and must not invent an exit code.
				r.deliverExit(pid, child.Exit{Lost: true})
			}
			break
		}
	}
	return len(r.waiting) > 0
}

func (r *Reaper) deliver(pid int, ws syscall.WaitStatus) {
	r.deliverExit(pid, child.Exit{Status: ws})
}

func (r *Reaper) deliverExit(pid int, e child.Exit) {
	if ch, ok := r.waiting[pid]; ok {
		delete(r.waiting, pid)
		ch <- e // buffered, never blocks
	}
}

// Start forks and execs argv0 and registers the child before the reaping
// loop can observe it. The returned channel receives the child's Exit once.
func (r *Reaper) Start(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan child.Exit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.CheckFDs {
		checkExecFDs()
	}
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan child.Exit, 1)
	r.waiting[pid] = ch
	return pid, ch, nil
}

// Pids returns the registered children that have not been reaped yet.
func (r *Reaper) Pids() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	pids := make([]int, 0, len(r.waiting))
	for pid := range r.waiting {
		pids = append(pids, pid)
	}
	return pids
}

// HasChildren reaps what it can and reports whether any child is left
// (every child in reapAll mode, registered ones otherwise). Used at shutdown.
func (r *Reaper) HasChildren() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reapLocked()
}
