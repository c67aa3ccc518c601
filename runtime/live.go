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

// Freeze freezes every process of id (an idle pool member costs no CPU).
// It returns once the kernel reports the cgroup frozen.
func (s *Selector) Freeze(ctx context.Context, id string) error {
	dir := s.cgroupDir(id)
	if dir == "" {
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
