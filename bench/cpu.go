package bench

import (
	"os"
	"strconv"
	"strings"
)

// cpuClock is how much CPU time has been spent so far, in milliseconds:
// on the whole host (every CPU's user, nice, system, irq and softirq time
// from /proc/stat: berth, runc, runc's init, the agents, the commands they
// run and the kernel work for them, and whatever else runs on the host),
// and, when the daemon's pid is known, by the daemon itself with the
// children it reaped (runc create, start, delete: utime, stime, cutime
// and cstime of /proc/<pid>/stat). bench runs on the daemon's host.
type cpuClock struct {
	HostMs      float64
	DaemonMs    float64 // -1 without a pid
	SandboxesMs float64 // -1 without a cgroup
}

// readCPU reads the clock; ok is false when /proc/stat cannot be read.
func readCPU(daemonPid int, cgroup string) (cpuClock, bool) {
	c := cpuClock{DaemonMs: -1, SandboxesMs: -1}
	if cgroup != "" {
		if ms, ok := cgroupCPU(cgroup); ok {
			c.SandboxesMs = ms
		}
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return c, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return c, false
	}
	var ticks float64
	// user nice system idle iowait irq softirq: all but idle and iowait.
	for _, i := range []int{1, 2, 3, 6, 7} {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return c, false
		}
		ticks += v
	}
	c.HostMs = ticks * 1000 / clockTicks
	if daemonPid > 0 {
		if ms, ok := processCPU(daemonPid); ok {
			c.DaemonMs = ms
		}
	}
	return c, true
}

// clockTicks is USER_HZ, which Linux fixes at 100 for /proc.
const clockTicks = 100

// cgroupCPU is the CPU time of the cgroup dir and everything below it,
// removed children included, in milliseconds: cgroup v2's cpu.stat
// usage_usec, or v1's cpuacct.usage (nanoseconds).
func cgroupCPU(dir string) (float64, bool) {
	if b, err := os.ReadFile(dir + "/cpu.stat"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				us, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				return us / 1000, err == nil
			}
		}
	}
	b, err := os.ReadFile(dir + "/cpuacct.usage")
	if err != nil {
		return 0, false
	}
	ns, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	return ns / 1e6, err == nil
}

// processCPU is pid's utime+stime+cutime+cstime in milliseconds.
func processCPU(pid int) (float64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing one (field 3, state, comes first).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, false
	}
	var ticks float64
	for _, j := range []int{11, 12, 13, 14} { // utime stime cutime cstime (fields 14-17)
		v, err := strconv.ParseFloat(f[j], 64)
		if err != nil {
			return 0, false
		}
		ticks += v
	}
	return ticks * 1000 / clockTicks, true
}

// CPUPer is the CPU time one operation of a phase cost: the phase's
// clock difference divided by its operations.
type CPUPer struct {
	// HostMs is host-wide (see cpuClock): exact only on an otherwise idle
	// machine, an upper bound otherwise.
	HostMs float64 `json:"host_ms"`
	// DaemonMs is the daemon with its reaped children (runc's create,
	// start and delete commands), when --daemon-pid names it.
	DaemonMs *float64 `json:"daemon_ms,omitempty"`
	// SandboxesMs is every process in the sandboxes' cgroups (runc's init
	// in the container, the agent, what it runs), when --sandbox-cgroup
	// names their parent.
	SandboxesMs *float64 `json:"sandboxes_ms,omitempty"`
	N           int      `json:"n"`
}

// cpuPer divides the clock's advance from a to b over n operations.
func cpuPer(a, b cpuClock, n int) *CPUPer {
	if n <= 0 {
		return nil
	}
	p := &CPUPer{HostMs: round((b.HostMs - a.HostMs) / float64(n)), N: n}
	if a.DaemonMs >= 0 && b.DaemonMs >= 0 {
		v := round((b.DaemonMs - a.DaemonMs) / float64(n))
		p.DaemonMs = &v
	}
	if a.SandboxesMs >= 0 && b.SandboxesMs >= 0 {
		v := round((b.SandboxesMs - a.SandboxesMs) / float64(n))
		p.SandboxesMs = &v
	}
	return p
}
