package runtime

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-sh/berth/internal/errdefs"
)

func baseOpts() SpecOptions {
	return SpecOptions{
		ID: "sb1", RootfsPath: "/var/lib/berth/sandboxes/sb1/rootfs",
		Args: []string{"/berth-agent"}, CgroupsPath: "/berth/sb1",
		Limits: Limits{MilliCPU: 250, MemoryBytes: 1 << 30, Pids: 512},
	}
}

func TestSpecPosture(t *testing.T) {
	s, err := Spec(baseOpts())
	if err != nil {
		t.Fatal(err)
	}
	p := s.Process
	if p.User.UID != 0 || !p.NoNewPrivileges || p.Terminal {
		t.Errorf("process: uid %d nnp %v terminal %v", p.User.UID, p.NoNewPrivileges, p.Terminal)
	}
	for _, set := range [][]string{p.Capabilities.Bounding, p.Capabilities.Effective, p.Capabilities.Permitted} {
		for _, bad := range []string{"CAP_SYS_ADMIN", "CAP_NET_RAW", "CAP_MKNOD", "CAP_SYS_PTRACE", "CAP_SYS_MODULE", "CAP_DAC_READ_SEARCH", "CAP_NET_ADMIN", "CAP_SYS_RAWIO"} {
			if slices.Contains(set, bad) {
				t.Errorf("capability %s granted", bad)
			}
		}
		if len(set) != 11 {
			t.Errorf("capability set has %d entries, want 11: %v", len(set), set)
		}
	}
	if len(p.Capabilities.Inheritable) != 0 || len(p.Capabilities.Ambient) != 0 {
		t.Errorf("inheritable/ambient caps must be empty")
	}
	if p.OOMScoreAdj == nil || *p.OOMScoreAdj <= 0 {
		t.Errorf("oomScoreAdj = %v, want > 0", p.OOMScoreAdj)
	}
	if len(p.Rlimits) == 0 || p.Rlimits[0].Type != "RLIMIT_NOFILE" {
		t.Errorf("rlimits = %v", p.Rlimits)
	}

	var ns []specs.LinuxNamespaceType
	for _, n := range s.Linux.Namespaces {
		ns = append(ns, n.Type)
		if n.Type == specs.NetworkNamespace && n.Path != "" {
			t.Errorf("empty NetNSPath must create a new netns, got path %q", n.Path)
		}
	}
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.MountNamespace, specs.UTSNamespace, specs.IPCNamespace, specs.NetworkNamespace, specs.CgroupNamespace} {
		if !slices.Contains(ns, want) {
			t.Errorf("namespace %s missing", want)
		}
	}
	for _, m := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/sys/firmware", "/proc/scsi", "/proc/acpi", "/sys/devices/virtual/powercap"} {
		if !slices.Contains(s.Linux.MaskedPaths, m) {
			t.Errorf("masked path %s missing", m)
		}
	}
	for _, m := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"} {
		if !slices.Contains(s.Linux.ReadonlyPaths, m) {
			t.Errorf("readonly path %s missing", m)
		}
	}
	mounts := map[string]specs.Mount{}
	for _, m := range s.Mounts {
		mounts[m.Destination] = m
	}
	if !slices.Contains(mounts["/sys"].Options, "ro") || !slices.Contains(mounts["/sys/fs/cgroup"].Options, "ro") {
		t.Errorf("/sys and /sys/fs/cgroup must be read-only")
	}
	if !slices.Contains(mounts["/dev/pts"].Options, "newinstance") {
		t.Errorf("/dev/pts must be a new instance")
	}
	if !slices.ContainsFunc(mounts["/dev/shm"].Options, func(o string) bool { return len(o) > 5 && o[:5] == "size=" }) {
		t.Errorf("/dev/shm must be size-capped: %v", mounts["/dev/shm"].Options)
	}

	r := s.Linux.Resources
	if *r.Memory.Limit != 1<<30 || *r.Memory.Swap != 1<<30 {
		t.Errorf("memory %d swap %d, want both 1 GiB (no swap)", *r.Memory.Limit, *r.Memory.Swap)
	}
	if *r.CPU.Quota != 25000 || *r.CPU.Period != 100000 {
		t.Errorf("cpu quota %d period %d, want 25000/100000", *r.CPU.Quota, *r.CPU.Period)
	}
	if *r.Pids.Limit != 512 {
		t.Errorf("pids %d", *r.Pids.Limit)
	}
	if len(r.Devices) == 0 || r.Devices[0].Allow || r.Devices[0].Access != "rwm" {
		t.Errorf("device cgroup must start with deny-all: %+v", r.Devices)
	}
	for _, d := range r.Devices[1:] {
		if d.Type != "c" || d.Major == nil || (*d.Major != 1 && *d.Major != 5 && *d.Major != 136) {
			t.Errorf("device rule outside the allowlist: %+v", d)
		}
	}
}

func TestSeccompProfile(t *testing.T) {
	s, err := Spec(baseOpts())
	if err != nil {
		t.Fatal(err)
	}
	sc := s.Linux.Seccomp
	if sc == nil {
		t.Fatal("no seccomp profile")
	}
	if !slices.Equal(sc.Architectures, []specs.Arch{specs.ArchX86_64}) {
		t.Errorf("architectures = %v, want x86_64 only (kills int 0x80 / x32)", sc.Architectures)
	}
	if sc.DefaultAction != specs.ActErrno || sc.DefaultErrnoRet == nil || *sc.DefaultErrnoRet != 38 {
		t.Errorf("default action %v, want ENOSYS for every syscall not allowed (allowlist)", sc.DefaultAction)
	}
	unconditional := map[string]uint{} // errno of unconditional ERRNO rules
	allowed := map[string]bool{}       // unconditional ALLOW
	conditional := map[string]int{}
	for _, r := range sc.Syscalls {
		for _, n := range r.Names {
			switch {
			case len(r.Args) > 0:
				conditional[n]++
			case r.Action == specs.ActAllow:
				if allowed[n] {
					t.Errorf("%s allowed twice", n)
				}
				allowed[n] = true
			default:
				unconditional[n] = *r.ErrnoRet
			}
		}
	}
	for n := range unconditional {
		if allowed[n] || conditional[n] > 0 && n != "clone3" {
			t.Errorf("%s is both refused and allowed", n)
		}
	}
	for _, n := range []string{"clone", "unshare", "socket", "personality"} {
		if allowed[n] {
			t.Errorf("%s must only be allowed through its argument rules", n)
		}
	}
	for _, n := range []string{"mount", "umount2", "pivot_root", "setns", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "open_by_handle_at", "name_to_handle_at", "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog"} {
		if unconditional[n] != 1 {
			t.Errorf("%s: errno %d, want EPERM unconditionally", n, unconditional[n])
		}
	}
	if unconditional["clone3"] != 38 {
		t.Errorf("clone3 must return ENOSYS so libc falls back to clone")
	}
	for _, n := range []string{"clone", "unshare", "socket", "personality"} {
		if conditional[n] == 0 {
			t.Errorf("%s has no argument filter", n)
		}
	}
	for _, n := range []string{"ptrace", "read", "write", "execve", "chroot", "setuid", "wait4", "pidfd_open"} {
		if _, ok := unconditional[n]; ok || !allowed[n] {
			t.Errorf("%s must stay allowed", n)
		}
	}

	o := baseOpts()
	o.NoSeccomp = true
	if s, _ := Spec(o); s.Linux.Seccomp != nil {
		t.Errorf("NoSeccomp still set a profile")
	}
}

func TestSpecOptions(t *testing.T) {
	o := baseOpts()
	o.NetNSPath = "/run/netns/sb1"
	o.Mounts = []specs.Mount{{Destination: "/run/berth", Type: "bind", Source: "/run/berth/sb1", Options: []string{"rbind", "ro"}}}
	o.MaskedPaths = []string{}
	o.Env = []string{"A=b"}
	s, err := Spec(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range s.Linux.Namespaces {
		if n.Type == specs.NetworkNamespace && n.Path != "/run/netns/sb1" {
			t.Errorf("netns path = %q", n.Path)
		}
	}
	if len(s.Linux.MaskedPaths) != 0 {
		t.Errorf("explicit empty MaskedPaths not honoured")
	}
	if s.Mounts[len(s.Mounts)-1].Destination != "/run/berth" {
		t.Errorf("extra mount not appended")
	}
	if !slices.Contains(s.Process.Env, defaultPath) || s.Hostname != "sb1" || s.Process.Cwd != "/" {
		t.Errorf("defaults: env %v host %q cwd %q", s.Process.Env, s.Hostname, s.Process.Cwd)
	}

	for name, mut := range map[string]func(*SpecOptions){
		"no args":          func(o *SpecOptions) { o.Args = nil },
		"relative rootfs":  func(o *SpecOptions) { o.RootfsPath = "rootfs" },
		"proc cwd":         func(o *SpecOptions) { o.Cwd = "/proc/self/fd/7" }, // CVE-2024-21626
		"dotdot cwd":       func(o *SpecOptions) { o.Cwd = "/a/../../x" },
		"relative mount":   func(o *SpecOptions) { o.Mounts = []specs.Mount{{Destination: "etc/x"}} },
		"negative memory":  func(o *SpecOptions) { o.Limits.MemoryBytes = -1 },
		"dotdot mount dst": func(o *SpecOptions) { o.Mounts = []specs.Mount{{Destination: "/x/../../etc"}} },
	} {
		o := baseOpts()
		mut(&o)
		if _, err := Spec(o); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want invalid argument", name, err)
		}
	}
}

func TestWriteBundle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	s, err := Spec(baseOpts())
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteBundle(dir, s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back specs.Spec
	if err := json.Unmarshal(b, &back); err != nil || back.Hostname != "sb1" {
		t.Fatalf("round trip: %v %q", err, back.Hostname)
	}
	st, _ := os.Stat(filepath.Join(dir, "config.json"))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("config.json mode %v", st.Mode())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temp files left: %v", ents)
	}
}

func TestSpecUserNS(t *testing.T) {
	o := baseOpts()
	o.UserNS = &IDMapping{HostID: 1 << 28, Size: 65536}
	o.SysfsSource = "/run/x/sys"
	s, err := Spec(o)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace }) {
		t.Errorf("no user namespace")
	}
	want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1 << 28, Size: 65536}}
	if !slices.Equal(s.Linux.UIDMappings, want) || !slices.Equal(s.Linux.GIDMappings, want) {
		t.Errorf("mappings %v %v", s.Linux.UIDMappings, s.Linux.GIDMappings)
	}
	if len(s.Linux.Sysctl) != 0 {
		t.Errorf("net sysctls cannot be written from a user namespace: %v", s.Linux.Sysctl)
	}
	for _, m := range s.Mounts {
		if m.Destination == "/sys" && (m.Source != "/run/x/sys" || !slices.Contains(m.Options, "ro")) {
			t.Errorf("/sys mount %+v, want a read-only bind of the host-made sysfs", m)
		}
	}
	// Negative control: without UserNS, sandbox root is host root.
	s, _ = Spec(baseOpts())
	if len(s.Linux.UIDMappings) != 0 {
		t.Errorf("mappings without UserNS")
	}
	o.UserNS = &IDMapping{HostID: 0, Size: 65536}
	if _, err := Spec(o); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a map onto host root: err = %v", err)
	}
}
