package agent

import (
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/agent/internal/child"
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
func snapshotTree(root int) []treeMember { return scanTree(root, true) }

// groupTree is snapshotTree once root itself was reaped: its process group
// and their descendants only. The pid root may then name an unrelated
// process (a reuse, possible once the group is gone), which is not counted.
func groupTree(root int) []treeMember { return scanTree(root, false) }

func scanTree(root int, withRoot bool) []treeMember {
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
		if (withRoot && pid == root) || s.pgid == root {
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
// (or at once for a non-terminating signal). The main process is signalled
// by pid only until it was reaped (its pid may belong to someone else
// then); after that, the members of its tree that still run (the record
// stays running until they are gone, see run) are signalled one by one,
// each pinned to its start time. A process whose tree is gone is left
// alone.
func (p *process) kill(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	if p.treeGone {
		p.mu.Unlock()
		return
	}
	if terminating(sig) {
		p.killed = true
	}
	members := p.membersLocked()
	if terminating(sig) {
		// The record ends only when these are gone too, even those that
		// leave the group or are orphaned by the signal (see run).
		p.known = append(p.known, members...)
	}
	if p.reaped && terminating(sig) {
		// The main process is gone; what ends the record is this signal.
		p.treeSignal = sig
	}
	if sig == syscall.SIGKILL {
		if !p.reaped {
			child.KillTree(p.pid)
		}
		p.sigkillLocked(members)
		p.nudgeLocked()
		p.mu.Unlock()
		<-p.done
		return
	}
	if !p.reaped {
		syscall.Kill(-p.pid, sig)
	}
	for _, m := range members {
		if m.pid != p.pid && m.alive() {
			syscall.Kill(m.pid, sig)
		}
	}
	if !p.reaped {
		syscall.Kill(p.pid, sig)
	}
	p.nudgeLocked()
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
		gone := p.treeGone
		p.mu.Unlock()
		if gone && !anyAlive(members, p.pid) {
			break
		}
	}
	p.mu.Lock()
	if !p.treeGone {
		// Still running after the grace period: the tree ends by SIGKILL,
		// and the record says so (137). Why it outlived the signal (its
		// state, pending, blocked and ignored signals) goes to the log.
		log.Printf("process %s (pid %d): %s did not end it within %s; sending SIGKILL to %s", p.id, p.pid, unix.SignalName(sig), grace, p.survivorsLocked(members))
		p.treeSignal = syscall.SIGKILL
		if !p.reaped {
			child.KillTree(p.pid)
		}
		p.sigkillLocked(append(members, p.membersLocked()...))
		p.nudgeLocked()
	} else {
		// A record that ended with its main process (EndWithMain): what
		// is left of the tree is still killed, outside the record.
		p.sigkillLocked(members)
	}
	p.mu.Unlock()
	<-p.done
}

// survivorsLocked describes what of p's tree still runs (at most a few
// processes, each with procSignalState), for the log line of a kill that
// had to escalate.
func (p *process) survivorsLocked(members []treeMember) string {
	var out []string
	seen := make(map[int]bool)
	if !p.reaped {
		seen[p.pid] = true
		out = append(out, "main pid "+strconv.Itoa(p.pid)+": "+procSignalState(p.pid))
	}
	n := 0
	for _, m := range append(members, p.membersLocked()...) {
		if seen[m.pid] || m.pid == p.pid || !m.alive() {
			continue
		}
		seen[m.pid] = true
		if n++; n > 4 {
			out = append(out, "...")
			break
		}
		out = append(out, "pid "+strconv.Itoa(m.pid)+": "+procSignalState(m.pid))
	}
	if len(out) == 0 {
		return "nothing (the tree ended meanwhile)"
	}
	return strings.Join(out, "; ")
}

// procSignalState summarises pid's run state and signal masks from
// /proc/pid/status (the fields that say why a signal had no effect).
func procSignalState(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(l, ":")
		switch k {
		case "Name", "State", "NSpgid", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt":
			if ok {
				out = append(out, k+"="+strings.Join(strings.Fields(v), " "))
			}
		}
	}
	if wchan, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/wchan"); err == nil && len(wchan) > 0 {
		out = append(out, "wchan="+string(wchan))
	}
	return strings.Join(out, " ")
}

// anyAlive reports whether a member other than the reaped main pid runs.
func anyAlive(members []treeMember, main int) bool {
	for _, m := range members {
		if m.pid != main && m.alive() {
			return true
		}
	}
	return false
}

// nudgeLocked tells run to look at the tree again soon.
func (p *process) nudgeLocked() {
	select {
	case p.nudge <- struct{}{}:
	default:
	}
}

// membersLocked is the tree as it is now: with the main process while it
// runs, else its process group and their descendants.
func (p *process) membersLocked() []treeMember {
	if p.reaped {
		return groupTree(p.pid)
	}
	return snapshotTree(p.pid)
}

// treeAlive reports whether anything of p's tree still runs: its process
// group and their descendants, or a member a kill saw (see kill). Call it
// only after the main process was reaped.
func (p *process) treeAlive() bool {
	if len(groupTree(p.pid)) > 0 {
		return true
	}
	p.mu.Lock()
	known := p.known
	p.mu.Unlock()
	for _, m := range known {
		if m.pid != p.pid && m.alive() {
			return true
		}
	}
	return false
}

// sigkillLocked SIGKILLs the members of p's tree that are still alive,
// never the reaped main pid.
func (p *process) sigkillLocked(members []treeMember) {
	for _, m := range members {
		if m.pid != p.pid && m.alive() {
			child.KillTree(m.pid)
		}
	}
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
