package agent

import (
	"net/http"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// treeMember pins a pid to its start time, so that a pid reused during the
// grace period is never signalled.
type treeMember struct {
	pid   int
	start uint64
}

// procStatAll reads ppid, pgid, state and start time from /proc/pid/stat.
func procStatAll(pid int) (ppid, pgid int, state byte, start uint64, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, 0, false
	}
	i := len(data) - 1
	for i >= 0 && data[i] != ')' {
		i--
	}
	if i < 0 || i+2 >= len(data) {
		return 0, 0, 0, 0, false
	}
	var f []string
	start0 := i + 2
	for j := start0; j <= len(data); j++ {
		if j == len(data) || data[j] == ' ' || data[j] == '\n' {
			if j > start0 {
				f = append(f, string(data[start0:j]))
			}
			start0 = j + 1
		}
	}
	// f[0] is field 3 (state); ppid is field 4, pgrp 5, starttime 22.
	if len(f) < 20 {
		return 0, 0, 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, 0, 0, false
	}
	return ppid, pgid, f[0][0], start, true
}

// snapshotTree returns root, its process group and every descendant of
// either, pinned to their start times.
func snapshotTree(root int) []treeMember {
	type st struct {
		ppid, pgid int
		start      uint64
	}
	all := make(map[int]st)
	children := make(map[int][]int)
	if d, err := os.Open("/proc"); err == nil {
		names, _ := d.Readdirnames(-1)
		d.Close()
		for _, n := range names {
			pid, err := strconv.Atoi(n)
			if err != nil {
				continue
			}
			if ppid, pgid, state, start, ok := procStatAll(pid); ok && state != 'Z' {
				all[pid] = st{ppid, pgid, start}
				children[ppid] = append(children[ppid], pid)
			}
		}
	}
	in := make(map[int]bool)
	var queue []int
	for pid, s := range all {
		if pid == root || s.pgid == root {
			in[pid] = true
			queue = append(queue, pid)
		}
	}
	for len(queue) > 0 {
		pid := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, c := range children[pid] {
			if !in[c] {
				in[c] = true
				queue = append(queue, c)
			}
		}
	}
	out := make([]treeMember, 0, len(in))
	for pid := range in {
		out = append(out, treeMember{pid, all[pid].start})
	}
	return out
}

func (t treeMember) alive() bool {
	_, _, state, start, ok := procStatAll(t.pid)
	return ok && state != 'Z' && start == t.start
}

// terminating reports whether sig asks a process to end; only those are
// escalated to SIGKILL after the grace period.
func terminating(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGKILL:
		return true
	}
	return false
}

// kill signals p's whole tree. A terminating signal is followed, after
// grace, by SIGKILL to every member of the tree that is still alive,
// including descendants that left the process group or were orphaned when
// their parent died of the first signal. It returns when the tree is dead
// (or at once for a non-terminating signal). A process that already ended
// is left alone: its pid may belong to someone else now.
func (p *process) kill(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	if p.reaped {
		p.mu.Unlock()
		return
	}
	if terminating(sig) {
		p.killed = true
	}
	if sig == syscall.SIGKILL {
		killTree(p.pid)
		p.mu.Unlock()
		<-p.done
		return
	}
	members := snapshotTree(p.pid)
	syscall.Kill(-p.pid, sig)
	for _, m := range members {
		syscall.Kill(m.pid, sig)
	}
	p.mu.Unlock()
	if !terminating(sig) {
		return
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-deadline.C:
			break wait
		case <-tick.C:
		}
		p.mu.Lock()
		reaped := p.reaped
		p.mu.Unlock()
		if !reaped {
			continue
		}
		alive := false
		for _, m := range members {
			if m.pid != p.pid && m.alive() {
				alive = true
				break
			}
		}
		if !alive {
			break
		}
	}
	p.mu.Lock()
	if !p.reaped {
		killTree(p.pid)
	}
	p.mu.Unlock()
	for _, m := range members {
		if m.pid != p.pid && m.alive() {
			killTree(m.pid)
		}
	}
	<-p.done
}

// parseSignal accepts "TERM", "SIGTERM" or "15"; empty means SIGTERM.
func parseSignal(s string) (syscall.Signal, error) {
	if s == "" {
		return syscall.SIGTERM, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 || unix.SignalName(syscall.Signal(n)) == "" {
			return 0, errdefs.InvalidArgument("unknown signal %q", s)
		}
		return syscall.Signal(n), nil
	}
	name := s
	if len(name) < 3 || name[:3] != "SIG" {
		name = "SIG" + name
	}
	sig := unix.SignalNum(name)
	if sig == 0 {
		return 0, errdefs.InvalidArgument("unknown signal %q", s)
	}
	return sig, nil
}

func parseGrace(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("graceMs")
	if v == "" {
		return DefaultKillGrace, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > maxKillGrace {
		return 0, errdefs.InvalidArgument("graceMs %q out of range [0, %d]", v, maxKillGrace.Milliseconds())
	}
	return time.Duration(ms) * time.Millisecond, nil
}
