package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// capMask is CapEff for Capabilities: CHOWN(0) DAC_OVERRIDE(1) FOWNER(3)
// FSETID(4) KILL(5) SETGID(6) SETUID(7) SETPCAP(8) NET_BIND_SERVICE(10)
// SYS_CHROOT(18) AUDIT_WRITE(29).
const capMask = "00000000200405fb"

type postureReport struct {
	CapEff, CapBnd, CapPrm, CapInh, CapAmb string
	NoNewPrivs, Seccomp                    string
	NS                                     map[string]string `json:"ns"`
	Kcore                                  string            `json:"kcore"`
	TimerList                              string            `json:"timer_list"`
	WriteSysrq                             string            `json:"write_sysrq"`
	WriteCorePattern                       string            `json:"write_core_pattern"`
	WriteSysKernel                         string            `json:"write_sys_kernel"`
	WriteCgroupMem                         string            `json:"write_cgroup_mem"`
	WriteCgroupPids                        string            `json:"write_cgroup_pids"`
	WriteReleaseAgent                      string            `json:"write_release_agent"`
	DevKmsg                                string            `json:"dev_kmsg"`
	Mknod                                  string            `json:"mknod"`
	OOMScoreAdj                            string            `json:"oom_score_adj"`
	FDs                                    map[string]string `json:"fds"`
}

func runPosture(t *testing.T, mut func(*SpecOptions)) postureReport {
	t.Helper()
	c := newContainer(t, []string{"/probe", "posture"}, mut)
	out := c.run(t, 10*time.Second)
	var p postureReport
	if err := json.Unmarshal([]byte(lastJSONLine(out)), &p); err != nil {
		t.Fatalf("probe output: %v\n%s", err, out)
	}
	return p
}

func TestPosture(t *testing.T) {
	p := runPosture(t, nil)
	if p.CapEff != capMask || p.CapBnd != capMask || p.CapPrm != capMask {
		t.Errorf("caps eff %s bnd %s prm %s, want %s", p.CapEff, p.CapBnd, p.CapPrm, capMask)
	}
	if p.CapInh != "0000000000000000" || p.CapAmb != "0000000000000000" {
		t.Errorf("inheritable %s ambient %s, want none", p.CapInh, p.CapAmb)
	}
	if p.NoNewPrivs != "1" || p.Seccomp != "2" {
		t.Errorf("NoNewPrivs %q Seccomp %q, want 1 and 2", p.NoNewPrivs, p.Seccomp)
	}
	for _, n := range []string{"pid", "mnt", "uts", "ipc", "net", "cgroup"} {
		host, _ := os.Readlink("/proc/self/ns/" + n)
		if p.NS[n] == "" || p.NS[n] == host {
			t.Errorf("namespace %s = %q, host %q: must be a new one", n, p.NS[n], host)
		}
	}
	if p.Kcore != "read 0 bytes" && !strings.HasPrefix(p.Kcore, "E") {
		t.Errorf("/proc/kcore readable: %s", p.Kcore)
	}
	if !strings.HasPrefix(p.TimerList, "read 0 bytes") {
		t.Errorf("/proc/timer_list not masked: %s", p.TimerList)
	}
	for name, v := range map[string]string{
		"/proc/sysrq-trigger": p.WriteSysrq, "core_pattern": p.WriteCorePattern,
		"/sys/kernel": p.WriteSysKernel, "memory cgroup": p.WriteCgroupMem,
		"pids cgroup": p.WriteCgroupPids, "release_agent": p.WriteReleaseAgent,
	} {
		if v == "OK" {
			t.Errorf("%s is writable from the sandbox", name)
		}
	}
	if p.DevKmsg != "ENOENT" {
		t.Errorf("/dev/kmsg: %s, want absent", p.DevKmsg)
	}
	if p.Mknod != "EPERM" {
		t.Errorf("mknod of a block device: %s, want EPERM", p.Mknod)
	}
	if p.OOMScoreAdj != "500" {
		t.Errorf("oom_score_adj %s", p.OOMScoreAdj)
	}
	t.Logf("kcore %s, sysrq %s, core_pattern %s, cgroup %s, release_agent %s", p.Kcore, p.WriteSysrq, p.WriteCorePattern, p.WriteCgroupMem, p.WriteReleaseAgent)
}

// TestRunMatchesCreateStart: a container made by Run (one `runc run
// --detach`, the start path's call) has exactly the posture of one made by
// Create + Start: capabilities, no_new_privs, seccomp, fresh namespaces,
// masked and read-only paths, devices, oom_score_adj, fds.
func TestRunMatchesCreateStart(t *testing.T) {
	needFixtures(t)
	want := runPosture(t, nil)
	c := newBundle(t, "", []string{"/probe", "posture"}, nil)
	if err := c.r.Run(context.Background(), c.id, c.bundle); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(c.bundle, PidFile)); err != nil || len(b) == 0 {
		t.Fatalf("run wrote no pid file: %q %v", b, err)
	}
	c.waitStatus(t, "stopped", 10*time.Second)
	var got postureReport
	out := c.output(t)
	if err := json.Unmarshal([]byte(lastJSONLine(out)), &got); err != nil {
		t.Fatalf("probe output: %v\n%s", err, out)
	}
	norm := func(p postureReport) string {
		// Namespace ids and the bundle's path differ between any two
		// containers: compare new-or-host and the fd targets' names.
		for n, v := range p.NS {
			host, _ := os.Readlink("/proc/self/ns/" + n)
			p.NS[n] = map[bool]string{true: "host", false: "new"}[v == host]
		}
		for fd, v := range p.FDs {
			p.FDs[fd] = filepath.Base(v)
		}
		b, _ := json.Marshal(p)
		return string(b)
	}
	if g, w := norm(got), norm(want); g != w {
		t.Errorf("posture after run:\n%s\nafter create + start:\n%s", g, w)
	}
	if err := c.r.Run(context.Background(), c.id, c.bundle); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second run: %v, want already exists", err)
	}
}

// TestSelectorDeleteWithoutState: deleting an id the runtime keeps no
// state for spawns nothing (Selector.Delete asks runc only when its state
// dir has the id) and succeeds; with state it deletes. The negative
// control is a created container, which the same call removes.
func TestSelectorDeleteWithoutState(t *testing.T) {
	needFixtures(t)
	ctx := context.Background()
	// A runtime binary that fails if it is ever run.
	never := filepath.Join(t.TempDir(), "never")
	if err := os.WriteFile(never, []byte("#!/bin/sh\necho ran >&2; exit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Selector{Default: New(never, t.TempDir())}
	if err := s.Delete(ctx, "unknown-id", true); err != nil {
		t.Errorf("delete without state: %v, want nil and no runtime call", err)
	}
	if err := os.Mkdir(filepath.Join(s.Default.Root, "half-made"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "half-made", true); err == nil || !strings.Contains(err.Error(), "ran") {
		t.Errorf("delete with a state dir: %v, want the runtime asked (and this one failing)", err)
	}
	c := newContainer(t, []string{"/bin/sleep", "1000"}, nil)
	real := &Selector{Default: c.r}
	if err := real.Delete(ctx, c.id, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.r.State(ctx, c.id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("state after selector delete: %v, want not found", err)
	}
}

// TestNoLeakedFDs lists the container init's fds with busybox ls (a Go probe
// would show its own runtime's fds): only stdio and ls's directory fd (#12).
func TestNoLeakedFDs(t *testing.T) {
	c := newContainer(t, []string{"/bin/ls", "-l", "/proc/self/fd/"}, nil)
	out := c.run(t, 10*time.Second)
	var fds []string
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, " -> "); i > 0 {
			f := strings.Fields(l[:i])
			fds = append(fds, f[len(f)-1]+"->"+l[i+4:])
		}
	}
	if len(fds) < 3 || len(fds) > 4 {
		t.Errorf("fds in the sandbox init: %v, want 0, 1, 2 and ls's own", fds)
	}
	for _, fd := range fds {
		num, target, _ := strings.Cut(fd, "->")
		switch num {
		case "0":
			if target != "/dev/null" {
				t.Errorf("stdin is %s, want /dev/null", target)
			}
		case "1", "2":
			if !strings.HasSuffix(target, AgentLog) {
				t.Errorf("fd %s is %s, want the bundle's %s", num, target, AgentLog)
			}
		case "3":
			if !strings.HasPrefix(target, "/proc/") {
				t.Errorf("fd 3 is %s", target)
			}
		default:
			t.Errorf("leaked fd %s", fd)
		}
	}
}

// TestPostureNegativeControl turns masking and read-only paths off and checks
// the probe then sees the holes, so TestPosture cannot pass vacuously.
func TestPostureNegativeControl(t *testing.T) {
	p := runPosture(t, func(o *SpecOptions) {
		o.MaskedPaths = []string{}
		o.ReadonlyPaths = []string{}
		o.NoSeccomp = true
	})
	if strings.HasPrefix(p.TimerList, "read 0 bytes") {
		t.Errorf("unmasked /proc/timer_list still empty: %s", p.TimerList)
	}
	// Opened only, nothing is written. (/proc/sysrq-trigger does not exist
	// on kernels without CONFIG_MAGIC_SYSRQ, so core_pattern is the witness.)
	if p.WriteCorePattern != "OK" {
		t.Errorf("without read-only paths core_pattern should open for writing: %s", p.WriteCorePattern)
	}
	if p.Seccomp != "0" {
		t.Errorf("Seccomp %q with NoSeccomp", p.Seccomp)
	}
}

// Syscalls the probe must see refused. Where seccomp is the only barrier
// (no capability guards them) the negative control below shows them open.
var wantBlocked = map[string]string{
	"clone_newuser": "EPERM", "unshare_newuser": "EPERM", "unshare_newns": "EPERM",
	"mount": "EPERM", "keyctl": "EPERM", "add_key": "EPERM", "bpf": "EPERM",
	"perf_event_open": "EPERM", "io_uring_setup": "EPERM", "userfaultfd": "EPERM",
	"init_module": "EPERM", "open_by_handle_at": "EPERM", "socket_alg": "EPERM",
	"socket_alg_highbits": "EPERM", "socket_vsock": "EPERM", "socket_tipc": "EPERM",
	"clone3": "ENOSYS", "personality_rie": "EPERM", "setns": "EPERM", "reboot": "EPERM",
	"int80": "killed",
}

// Seccomp is the only wall for these (no capability needed on this kernel).
var seccompOnly = []string{"clone_newuser", "keyctl", "add_key", "io_uring_setup", "userfaultfd", "socket_vsock", "socket_alg_highbits", "clone3", "personality_rie", "int80"}

func runSyscalls(t *testing.T, noSeccomp bool) map[string]string {
	t.Helper()
	c := newContainer(t, []string{"/probe", "syscalls"}, func(o *SpecOptions) { o.NoSeccomp = noSeccomp })
	out := c.run(t, 10*time.Second)
	res := map[string]string{}
	if err := json.Unmarshal([]byte(lastJSONLine(out)), &res); err != nil {
		t.Fatalf("probe output: %v\n%s", err, out)
	}
	return res
}

func TestSeccompBlocksSyscalls(t *testing.T) {
	res := runSyscalls(t, false)
	for name, want := range wantBlocked {
		if res[name] != want && !(want == "killed" && strings.HasPrefix(res[name], "killed:")) {
			t.Errorf("%s: got %q, want %q", name, res[name], want)
		}
	}
	// Not over-blocked: ordinary sockets and the personality query work.
	for _, name := range []string{"socket_inet", "socket_unix", "socket_netlink", "personality_query"} {
		if res[name] != "OK" {
			t.Errorf("%s: got %q, want OK", name, res[name])
		}
	}
	t.Logf("with seccomp: %v", res)
}

func TestSeccompNegativeControl(t *testing.T) {
	res := runSyscalls(t, true)
	t.Logf("without seccomp: %v", res)
	for _, name := range seccompOnly {
		if res[name] == wantBlocked[name] || strings.HasPrefix(res[name], "killed") {
			t.Errorf("%s is still %q without seccomp: the probe cannot tell seccomp is what blocks it", name, res[name])
		}
	}
	// Capabilities still refuse these without seccomp (defence in depth).
	for _, name := range []string{"mount", "unshare_newns", "bpf", "setns", "reboot"} {
		if res[name] != "EPERM" {
			t.Errorf("%s without seccomp: %q, want EPERM from the dropped capabilities", name, res[name])
		}
	}
}
