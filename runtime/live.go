package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/weaken"
)

// Live changes to a running runc container that a warm-pool claim
// (node/local's pool) makes on its hot path: freeze and thaw, new limits,
// a new hostname. On a cgroup v2 host they write the container's cgroup
// files and enter its UTS namespace directly, spawning no runc; elsewhere
// (cgroup v1, gVisor) they fall back to runc's pause, resume and update,
// and a gVisor sandbox's hostname cannot be changed from the host.

// cgroupDir is id's cgroup v2 directory, "" when the host is not v2-only
// or id runs under gVisor (runsc keeps its own cgroup layout).
func (s *Selector) cgroupDir(id string) string {
	if validID(id) != nil || s.IsGVisor(id) || !Unified() {
		return ""
	}
	return filepath.Join(CgroupRoot, filepath.Clean("/"+s.CgroupsPath(id)))
}

// v1Dir is id's directory in the cgroup v1 hierarchy of controller, ""
// on a v2-only host or for gVisor.
func (s *Selector) v1Dir(id, controller string) string {
	if validID(id) != nil || s.IsGVisor(id) || Unified() {
		return ""
	}
	d := filepath.Join(CgroupRoot, controller, filepath.Clean("/"+s.CgroupsPath(id)))
	if _, err := os.Stat(d); err != nil {
		return ""
	}
	return d
}

// v1Freeze sets a v1 freezer and waits for the state to be reached.
func v1Freeze(ctx context.Context, dir, state string) error {
	if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte(state), 0); err != nil {
		return err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) == state {
			return nil
		}
		select {
		case <-ctx.Done():
			return errdefs.Wrap(errdefs.ErrUnavailable, ctx.Err(), "freezer %s", state)
		case <-time.After(time.Millisecond):
		}
	}
}

// Freeze freezes every process of id (an idle pool member costs no CPU).
// It returns once the kernel reports the cgroup frozen.
func (s *Selector) Freeze(ctx context.Context, id string) error {
	dir := s.cgroupDir(id)
	if dir == "" {
		if d := s.v1Dir(id, "freezer"); d != "" {
			return v1Freeze(ctx, d, "FROZEN")
		}
		return s.Pick(id).Pause(ctx, id)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("1"), 0); err != nil {
		return fmt.Errorf("freeze %s: %w", id, err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return fmt.Errorf("freeze %s: %w", id, err)
		}
		if strings.Contains(string(b), "frozen 1") {
			return nil
		}
		select {
		case <-ctx.Done():
			return errdefs.Wrap(errdefs.ErrUnavailable, ctx.Err(), "freeze %s", id)
		case <-time.After(time.Millisecond):
		}
	}
}

// Thaw lets a frozen id run again.
func (s *Selector) Thaw(ctx context.Context, id string) error {
	dir := s.cgroupDir(id)
	if dir == "" {
		if d := s.v1Dir(id, "freezer"); d != "" {
			return v1Freeze(ctx, d, "THAWED")
		}
		return s.Pick(id).Resume(ctx, id)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0); err != nil {
		return fmt.Errorf("thaw %s: %w", id, err)
	}
	return nil
}

// Resize gives a running id the limits l, the same values a spec with l
// gets at create (resources in spec.go, as runc writes them on v2).
func (s *Selector) Resize(ctx context.Context, id string, l Limits) error {
	dir := s.cgroupDir(id)
	if dir == "" {
		if done, err := s.resizeV1(id, l); done {
			return err
		}
		return s.Pick(id).Update(ctx, id, l)
	}
	type write struct{ file, value string }
	var ws []write
	if l.MilliCPU > 0 {
		weight, ok := runcWeight(dir, shares(l.MilliCPU))
		if !ok {
			// A conversion of shares to cpu.weight this code does not
			// know: let runc write what it would.
			return s.Pick(id).Update(ctx, id, l)
		}
		quota := l.MilliCPU * cpuPeriod / 1000
		ws = append(ws, write{"cpu.max", strconv.FormatInt(quota, 10) + " " + strconv.Itoa(cpuPeriod)},
			write{"cpu.weight", strconv.FormatUint(weight, 10)})
	}
	if l.MemoryBytes > 0 && !weaken.Off(weaken.MemoryLimit) {
		// memory+swap equals memory: no swap. Swap first, so the pair
		// never allows more than the old memory limit in between.
		ws = append(ws, write{"memory.swap.max", "0"}, write{"memory.max", strconv.FormatInt(l.MemoryBytes, 10)})
	}
	if l.Pids > 0 && !weaken.Off(weaken.PIDLimit) {
		ws = append(ws, write{"pids.max", strconv.FormatInt(l.Pids, 10)})
	}
	for _, w := range ws {
		err := os.WriteFile(filepath.Join(dir, w.file), []byte(w.value), 0)
		if errors.Is(err, os.ErrNotExist) && w.file == "memory.swap.max" {
			continue // a kernel without swap accounting
		}
		if err != nil {
			return fmt.Errorf("resize %s: %s: %w", id, w.file, err)
		}
	}
	return nil
}

// SetHostname sets the hostname of id's UTS namespace from a host thread
// that enters it (through a pidfd of the container's init, so a recycled
// pid cannot be entered instead). runc only: a gVisor sandbox's UTS
// namespace lives in its sentry.
func (s *Selector) SetHostname(id, bundle, name string) error {
	if s.IsGVisor(id) {
		return errdefs.FailedPrecondition("sandbox %s runs under gVisor: its hostname cannot be set from the host", id)
	}
	pid, err := s.InitPid(id, bundle)
	if err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	return SetHostname(pid, name)
}

// SetHostname sets the hostname of pid's UTS namespace.
func SetHostname(pid int, name string) error {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("set hostname: open pid %d: %w", pid, err)
	}
	defer unix.Close(pfd)
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Setns(pfd, unix.CLONE_NEWUTS); err != nil {
			errc <- fmt.Errorf("enter UTS namespace of pid %d: %w", pid, err)
			return
		}
		errc <- unix.Sethostname([]byte(name))
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	return nil
}

// shares is the spec's cpu.shares for milliCPU (resources in spec.go).
func shares(milliCPU int64) uint64 {
	v := uint64(milliCPU * 1024 / 1000)
	if v < 2 {
		v = 2
	}
	return v
}

// runcWeight is the cpu.weight runc writes for shares on cgroup v2. runc
// has used two conversions (linear, then since 2025 a quadratic one in
// log space); which one this runc uses is read off the container's
// current cgroup: the weight it wrote for the shares of its current quota.
// ok is false when neither fits.
func runcWeight(dir string, want uint64) (uint64, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] == "max" {
		return 0, false
	}
	quota, err1 := strconv.ParseInt(f[0], 10, 64)
	period, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || period <= 0 {
		return 0, false
	}
	b, err = os.ReadFile(filepath.Join(dir, "cpu.weight"))
	if err != nil {
		return 0, false
	}
	cur, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false
	}
	have := shares(quota * 1000 / period)
	lin, quad := linearWeight(have), quadraticWeight(have)
	switch {
	case lin == quad:
		return 0, false // cannot tell which
	case cur == quad:
		return quadraticWeight(want), true
	case cur == lin:
		return linearWeight(want), true
	}
	return 0, false
}

// linearWeight is runc's conversion until 2025.
func linearWeight(shares uint64) uint64 {
	if shares == 0 {
		return 0
	}
	return 1 + ((shares-2)*9999)/262142
}

// quadraticWeight is the conversion runc (opencontainers/cgroups) uses
// since 2025: it maps the default 1024 shares to the default weight 100.
func quadraticWeight(shares uint64) uint64 {
	switch {
	case shares == 0:
		return 0
	case shares <= 2:
		return 1
	case shares >= 262144:
		return 10000
	}
	l := math.Log2(float64(shares))
	return uint64(math.Ceil(math.Pow(10, (l*l+125*l)/612.0-7.0/34.0)))
}

// resizeV1 writes l to id's cgroup v1 files as runc does for the same
// spec (cpu.cfs_period_us, cpu.cfs_quota_us, cpu.shares;
// memory.limit_in_bytes with memory.memsw.limit_in_bytes equal to it, in
// the order the kernel accepts; pids.max). done is false when the
// hierarchies are not where they are expected (the caller uses runc).
func (s *Selector) resizeV1(id string, l Limits) (done bool, err error) {
	cpu, mem, pids := s.v1Dir(id, "cpu"), s.v1Dir(id, "memory"), s.v1Dir(id, "pids")
	if cpu == "" || mem == "" || pids == "" {
		return false, nil
	}
	w := func(dir, file, v string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
			return fmt.Errorf("resize %s: %s: %w", id, file, err)
		}
		return nil
	}
	if l.MilliCPU > 0 {
		if err := w(cpu, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
			return true, err
		}
		if err := w(cpu, "cpu.cfs_quota_us", strconv.FormatInt(l.MilliCPU*cpuPeriod/1000, 10)); err != nil {
			return true, err
		}
		if err := w(cpu, "cpu.shares", strconv.FormatUint(shares(l.MilliCPU), 10)); err != nil {
			return true, err
		}
	}
	if l.MemoryBytes > 0 && !weaken.Off(weaken.MemoryLimit) {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		_, serr := os.Stat(filepath.Join(mem, "memory.memsw.limit_in_bytes"))
		swap := serr == nil
		cur, _ := os.ReadFile(filepath.Join(mem, "memory.limit_in_bytes"))
		curV, _ := strconv.ParseInt(strings.TrimSpace(string(cur)), 10, 64)
		// memsw must stay at or above the limit: raise it first when
		// growing, lower it last when shrinking.
		order := []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"}
		if l.MemoryBytes > curV {
			order = []string{"memory.memsw.limit_in_bytes", "memory.limit_in_bytes"}
		}
		for _, f := range order {
			if f == "memory.memsw.limit_in_bytes" && !swap {
				continue
			}
			if err := w(mem, f, v); err != nil {
				return true, err
			}
		}
	}
	if l.Pids > 0 && !weaken.Off(weaken.PIDLimit) {
		if err := w(pids, "pids.max", strconv.FormatInt(l.Pids, 10)); err != nil {
			return true, err
		}
	}
	return true, nil
}
