package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/weaken"
)

// Limits are a sandbox's cgroup bounds. Zero means "no limit" for each.
type Limits struct {
	MilliCPU    int64 // CPU time per 100 ms period, in thousandths of a CPU (250 = 1/4 vCPU)
	MemoryBytes int64 // memory limit; memory+swap is set to the same value: no swap
	Pids        int64 // max tasks (processes + threads)
}

// SpecOptions describe one sandbox container.
type SpecOptions struct {
	ID, Hostname, RootfsPath string
	Args                     []string // the agent's argv; it runs as uid 0
	Env                      []string
	Cwd                      string
	Limits                   Limits
	NetNSPath                string        // existing netns to join; "" = a new, empty one
	Mounts                   []specs.Mount // extra mounts from the controller (agent binary, socket dir, resolv.conf, hosts)
	CgroupsPath              string        // e.g. "/berth/<id>"
	NoSeccomp                bool          // negative-control tests only
	// UserNS maps the sandbox's ids 0..Size-1 to host ids HostID.. in a new
	// user namespace; nil runs without one (root is host root).
	UserNS *IDMapping
	// SysfsSource, if set, is a read-only sysfs mounted by the host in the
	// sandbox's netns (MountSysfs), bind-mounted at /sys instead of a
	// sysfs mount the container cannot make from its user namespace.
	SysfsSource   string
	ReadonlyPaths []string // nil = DefaultReadonlyPaths
	MaskedPaths   []string // nil = DefaultMaskedPaths
}

// IDMapping is one contiguous uid and gid mapping (the same for both).
type IDMapping struct {
	HostID, Size uint32
}

// Capabilities is the whole capability set of a sandbox (bounding = effective
// = permitted; inheritable and ambient empty). It is Docker's default minus
// NET_RAW and MKNOD:
//   - CHOWN, DAC_OVERRIDE, FOWNER, FSETID: root inside the sandbox owns its files
//     (package managers chown and chmod freely).
//   - SETUID, SETGID, SETPCAP: drop to other users (su, sudo, useradd, npm's
//     uid switching) and drop capabilities further.
//   - KILL: signal processes of other uids inside the sandbox (pid ns bounds it).
//   - NET_BIND_SERVICE: dev servers on ports < 1024.
//   - SYS_CHROOT: chroot-using tools (debootstrap, some builds).
//   - AUDIT_WRITE: login/sshd-style tools that log via audit.
//
// Not granted: NET_RAW (raw sockets: ARP/IP spoofing on the bridge, proxy
// bypass, CVE-2020-14386 packet socket LPE), MKNOD (device nodes; the device
// cgroup also denies them), SYS_ADMIN (mount, namespaces, most escapes),
// SYS_PTRACE, SYS_MODULE, SYS_RAWIO, NET_ADMIN, DAC_READ_SEARCH (the
// open_by_handle_at "shocker" escape), and everything else.
var Capabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_AUDIT_WRITE",
}

// DefaultMaskedPaths are hidden (a /dev/null or empty read-only tmpfs over
// them): kernel memory, keys, timing side channels and hardware interfaces.
var DefaultMaskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
	"/proc/sched_debug", "/proc/scsi", "/sys/firmware",
	"/sys/devices/virtual/powercap", // RAPL energy counters: Platypus side channel (CVE-2020-8694)
}

// DefaultReadonlyPaths are bind-remounted read-only: host-wide kernel knobs
// (/proc/sys/kernel/core_pattern would run a host binary as root,
// /proc/sysrq-trigger reboots the host).
var DefaultReadonlyPaths = []string{
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
}

// Rlimits and OOM score.
const (
	nofileSoft = 65536   // fd-scanning code stays fast; processes may raise it
	nofileHard = 1 << 20 // Docker's default, = fs.nr_open's default
	// OOMScoreAdj > 0 makes the kernel's global OOM killer pick sandbox
	// processes before the daemon (which runs at <= 0). Sandboxes cannot
	// lower it without CAP_SYS_RESOURCE.
	OOMScoreAdj = 500
	shmSize     = "67108864" // /dev/shm cap; it is also charged to the memory cgroup
	cpuPeriod   = 100000     // µs
)

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Spec builds the OCI runtime config for one sandbox.
func Spec(o SpecOptions) (*specs.Spec, error) {
	if o.ID == "" || len(o.Args) == 0 {
		return nil, errdefs.InvalidArgument("container spec needs an id and args")
	}
	if !filepath.IsAbs(o.RootfsPath) {
		return nil, errdefs.InvalidArgument("rootfs path %q is not absolute", o.RootfsPath)
	}
	cwd := o.Cwd
	if cwd == "" {
		cwd = "/"
	}
	// A relative or /proc/self/fd cwd is how CVE-2024-21626 leaked a host
	// directory into the container; only clean absolute paths are taken.
	if err := checkContainerPath(cwd); err != nil {
		return nil, fmt.Errorf("cwd: %w", err)
	}
	if o.Limits.MilliCPU < 0 || o.Limits.MemoryBytes < 0 || o.Limits.Pids < 0 {
		return nil, errdefs.InvalidArgument("negative resource limit %+v", o.Limits)
	}
	hostname := o.Hostname
	if hostname == "" {
		hostname = o.ID
	}
	env := append([]string(nil), o.Env...)
	if !hasEnv(env, "PATH") {
		env = append(env, defaultPath)
	}
	caps := append([]string(nil), Capabilities...)
	if weaken.Off(weaken.Caps) {
		caps = ownCapabilities()
	}
	oom := OOMScoreAdj
	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: hostname,
		Root:     &specs.Root{Path: o.RootfsPath},
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: append([]string(nil), o.Args...),
			Env:  env,
			Cwd:  cwd,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         []specs.POSIXRlimit{nofile()},
			NoNewPrivileges: !weaken.Off(weaken.NoNewPrivs), // setuid binaries and file caps cannot raise privileges (checklist #17)
			OOMScoreAdj:     &oom,
		},
		Mounts: defaultMounts(weaken.Off(weaken.MaskedPaths)),
		Linux: &specs.Linux{
			CgroupsPath: o.CgroupsPath,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.MountNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.NetworkNamespace, Path: o.NetNSPath},
				{Type: specs.CgroupNamespace},
			},
			Resources:     resources(o.Limits),
			MaskedPaths:   orDefault(o.MaskedPaths, DefaultMaskedPaths),
			ReadonlyPaths: orDefault(o.ReadonlyPaths, DefaultReadonlyPaths),
		},
	}
	if o.SysfsSource != "" {
		for i := range s.Mounts {
			if s.Mounts[i].Destination == "/sys" {
				opts := []string{"rbind", "nosuid", "noexec", "nodev", "ro"}
				if weaken.Off(weaken.MaskedPaths) {
					opts = opts[:4]
				}
				s.Mounts[i] = specs.Mount{Destination: "/sys", Type: "bind", Source: o.SysfsSource, Options: opts}
			}
		}
	}
	if weaken.Off(weaken.MaskedPaths) {
		s.Linux.MaskedPaths, s.Linux.ReadonlyPaths = []string{}, []string{}
	}
	if o.UserNS != nil && !weaken.Off(weaken.UserNS) {
		if o.UserNS.HostID == 0 || o.UserNS.Size == 0 {
			return nil, errdefs.InvalidArgument("user namespace mapping %+v maps host root or nothing", *o.UserNS)
		}
		m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: o.UserNS.HostID, Size: o.UserNS.Size}}
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		s.Linux.UIDMappings, s.Linux.GIDMappings = m, append([]specs.LinuxIDMapping(nil), m...)
		// A joined netns belongs to the host's user namespace, so the
		// container cannot write its net.* sysctls; the network package
		// sets ping_group_range when it creates the netns.
	} else {
		// ICMP echo without NET_RAW: ping works through ping sockets.
		s.Linux.Sysctl = map[string]string{"net.ipv4.ping_group_range": "0 2147483647"}
	}
	if !o.NoSeccomp && !weaken.Off(weaken.Seccomp) {
		s.Linux.Seccomp = Seccomp()
	}
	for _, m := range o.Mounts {
		if err := checkContainerPath(m.Destination); err != nil {
			return nil, fmt.Errorf("mount destination: %w", err)
		}
		m.Options = append([]string(nil), m.Options...)
		s.Mounts = append(s.Mounts, m)
	}
	return s, nil
}

// nofile caps RLIMIT_NOFILE at the daemon's own hard limit: raising a hard
// limit needs CAP_SYS_RESOURCE, which a daemon run under a restricted
// supervisor may lack, and runc would then fail every create.
func nofile() specs.POSIXRlimit {
	hard, soft := uint64(nofileHard), uint64(nofileSoft)
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Max < hard {
		hard = rl.Max
	}
	if soft > hard {
		soft = hard
	}
	return specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Soft: soft, Hard: hard}
}

func defaultMounts(rwSys bool) []specs.Mount {
	sys := []string{"nosuid", "noexec", "nodev", "ro"}
	if rwSys {
		sys = sys[:3]
	}
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=" + shmSize}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: sys},
		// With a cgroup namespace the sandbox sees only its own subtree, read-only
		// (CVE-2022-0492: writing release_agent needs a writable cgroupfs).
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
	}
}

func resources(l Limits) *specs.LinuxResources {
	r := &specs.LinuxResources{Devices: DeviceAllowlist()}
	if weaken.Off(weaken.Devices) {
		r.Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
	}
	if l.MemoryBytes > 0 && !weaken.Off(weaken.MemoryLimit) {
		mem, swap := l.MemoryBytes, l.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &mem, Swap: &swap}
	}
	if l.MilliCPU > 0 {
		quota := l.MilliCPU * cpuPeriod / 1000
		period := uint64(cpuPeriod)
		shares := uint64(l.MilliCPU * 1024 / 1000)
		if shares < 2 {
			shares = 2
		}
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period, Shares: &shares}
	}
	if l.Pids > 0 && !weaken.Off(weaken.PIDLimit) {
		p := l.Pids
		r.Pids = &specs.LinuxPids{Limit: &p}
	}
	return r
}

// checkContainerPath accepts clean absolute paths only: no "..", no /proc.
func checkContainerPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return errdefs.InvalidArgument("path %q must be absolute and clean", p)
	}
	if p == "/proc" || strings.HasPrefix(p, "/proc/") {
		return errdefs.InvalidArgument("path %q is under /proc", p)
	}
	return nil
}

func hasEnv(env []string, key string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, key+"=") {
			return true
		}
	}
	return false
}

func orDefault(v, def []string) []string {
	if v == nil {
		v = def
	}
	return append([]string{}, v...)
}

// WriteBundle writes s as dir/config.json atomically (temp file, fsync,
// rename), creating dir if needed. The file is 0600: env may hold tokens.
func WriteBundle(dir string, s *specs.Spec) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".config.json.*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, "config.json"))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write bundle %s: %w", dir, err)
	}
	return nil
}

func devRule(major, minor int64, access string) specs.LinuxDeviceCgroup {
	maj, min := major, minor
	r := specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &maj, Access: access}
	if minor >= 0 {
		r.Minor = &min
	}
	return r
}

// DeviceAllowlist is the device cgroup rule set: everything denied, then
// the character devices a Linux userland needs. No block devices, no
// /dev/mem or /dev/kmsg, no disks, no mknod of anything else (MKNOD is not
// granted either; in a user namespace mknod of devices is refused anyway).
func DeviceAllowlist() []specs.LinuxDeviceCgroup {
	return []specs.LinuxDeviceCgroup{
		{Allow: false, Access: "rwm"},
		devRule(1, 3, "rwm"),   // /dev/null
		devRule(1, 5, "rwm"),   // /dev/zero
		devRule(1, 7, "rwm"),   // /dev/full
		devRule(1, 8, "rwm"),   // /dev/random
		devRule(1, 9, "rwm"),   // /dev/urandom
		devRule(5, 0, "rwm"),   // /dev/tty
		devRule(5, 1, "rw"),    // /dev/console
		devRule(5, 2, "rwm"),   // /dev/ptmx
		devRule(136, -1, "rw"), // /dev/pts/*
	}
}

// allCapabilities is every capability; only the Caps negative control
// (internal/weaken) hands it out.
var allCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
	"CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
	"CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// ownCapabilities is every capability in this process's bounding set (a
// daemon under a restricted supervisor may lack some; runc cannot grant
// more than it has).
func ownCapabilities() []string {
	st, err := procStatus(os.Getpid())
	if err != nil {
		return append([]string(nil), allCapabilities...)
	}
	var bnd uint64
	fmt.Sscanf(st["CapBnd"], "%x", &bnd)
	var out []string
	for bit, c := range allCapabilities {
		if bnd&(1<<bit) != 0 {
			out = append(out, c)
		}
	}
	return out
}
