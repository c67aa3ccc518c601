package local

import (
	"context"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
)

// watchInit notices the end of a running sandbox's main process (berth's
// agent, PID 1 inside it) when nobody asked for it: killed from the host,
// crashed, or starved of threads by a bomb inside. The sandbox's compute
// is then lost; it is marked sleeping with its files kept, so the next
// request starts it again instead of failing against a dead socket.
//
// It waits on a pidfd through the runtime poller (no thread per sandbox)
// and gives up quietly where pidfds are missing (the runtime wrote no pid
// file, or the kernel is too old): those sandboxes keep the old
// behaviour, recovered at the next daemon restart.
func (m *Manager) watchInit(name, id, bundle, run string) {
	ctx := context.Background()
	pid, err := m.cfg.Runtime.InitPid(id, bundle)
	if err != nil {
		return
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// A pidfd turns readable when its process has exited.
	exited := false
	err = rc.Read(func(fd uintptr) bool {
		n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		exited = n > 0
		return exited
	})
	if err != nil || !exited {
		return
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a) // destroyed meanwhile: lock made an empty actor
		return
	}
	if a.rec.RunID != run || a.rec.State != api.StateRunning {
		return // stopped on purpose (sleep, destroy) or already restarted
	}
	m.cfg.Logf("sandbox %s: its main process (berth's agent) exited; its compute is stopped, files kept, and the next request starts it again", name)
	if err := m.stopCompute(ctx, a); err != nil {
		m.cfg.Logf("sandbox %s: stop after its agent exited: %v", name, err)
	}
	a.rec.State, a.rec.StartedAt, a.rec.IP = api.StateSleeping, time.Time{}, ""
	if err := m.save(ctx, a); err != nil {
		m.cfg.Logf("sandbox %s: %v", name, err)
	}
	m.journal(ctx, name, "compute-lost", "the sandbox's agent exited")
	m.cfg.Meter.AgentDied()
}
