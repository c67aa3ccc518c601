package runtime

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The seccomp profile is default-allow with an explicit EPERM list (see
// doc.go for why, and for what that choice costs). Every entry names the
// attack it removes.

// blockedSyscalls fail with EPERM whatever their arguments.
var blockedSyscalls = []string{
	// Mount API: remounting /proc or /sys rw, or mounting over masked paths
	// (CVE-2019-19921 class, CVE-2022-0492 cgroupfs release_agent). CAP_SYS_ADMIN
	// is dropped too; this is the second wall.
	"mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree",
	"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	// Joining other namespaces (a leaked nsfd must not be usable).
	"setns",
	// Kernel keyrings are not namespaced: keys of other containers/host and
	// a long CVE history (CVE-2016-0728). No capability guards them.
	"keyctl", "add_key", "request_key",
	// eBPF and perf: large kernel attack surface and side channels.
	"bpf", "perf_event_open",
	// io_uring bypasses syscall-level filtering for the ops it carries and
	// has had many LPEs (CVE-2022-29582, CVE-2023-2598).
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// userfaultfd turns kernel races into reliable exploits.
	"userfaultfd",
	// Kernel modules and replacing the kernel.
	"init_module", "finit_module", "delete_module", "create_module",
	"get_kernel_syms", "query_module", "kexec_load", "kexec_file_load",
	// open_by_handle_at: the "shocker" escape (read host files by inode handle).
	"open_by_handle_at", "name_to_handle_at",
	// Host-wide state.
	"reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog",
	"settimeofday", "clock_settime", "clock_adjtime", "vhangup",
	"iopl", "ioperm", "lookup_dcookie", "nfsservctl", "uselib", "ustat",
	"sysfs", "_sysctl", "fanotify_init",
}

// Namespace-creating clone/unshare flags. CLONE_NEWUSER is the important one:
// creating a user namespace needs no capability, and inside it a process
// holds every capability over the new namespaces, which reopens mount,
// netfilter and other code paths (CVE-2022-0185, CVE-2023-32233). The other
// flags need CAP_SYS_ADMIN, which is dropped; they are listed anyway.
var nsFlags = []uint64{
	unix.CLONE_NEWNS, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER,
	unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWCGROUP,
}

const cloneNewTime = 0x80 // unshare only: for clone() bits 0-7 are the exit signal

// Socket families allowed: AF_UNIX(1), AF_INET(2), AF_INET6(10),
// AF_NETLINK(16), AF_PACKET(17, useless without CAP_NET_RAW). Everything else
// (AF_ALG=38, AF_VSOCK=40, AF_TIPC, AF_RDS, AF_KEY, ...) is rarely needed and
// is where socket-family LPEs live (CVE-2021-43267 TIPC, CVE-2010-3904 RDS,
// CVE-2024-26581 ...). Families 0-17 other than those are listed one by one;
// everything above 17 is refused with one GT rule.
var blockedLowFamilies = []uint64{3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15}

const maxAllowedFamily = 17

// personality bits refused: READ_IMPLIES_EXEC (every readable mapping becomes
// executable) and MMAP_PAGE_ZERO (maps page 0, a NULL-deref exploit aid).
// Bit 31 is part of each mask so the query personality(0xffffffff), which has
// every bit set, still works (it is what setarch and gdb call).
var blockedPersonalityBits = []uint64{0x0400000, 0x0100000}

func errnoRet(e unix.Errno) *uint { v := uint(e); return &v }

// lo32 is the mask for comparing an int argument: the kernel truncates int
// arguments to 32 bits, seccomp sees all 64, so an equality check on the raw
// register can be dodged by setting the upper half (socket(0x1_00000026)
// would still open AF_ALG). Masking compares what the kernel will use.
const lo32 = 0xffffffff

// Seccomp returns berth's seccomp profile for x86_64.
func Seccomp() *specs.LinuxSeccomp {
	eperm := errnoRet(unix.EPERM)
	s := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		// Only the native ABI: the filter's bad-arch action kills the thread
		// that enters through int 0x80 (i386 ABI) or x32, whose syscall
		// numbers differ and would otherwise walk past every rule below.
		Architectures: []specs.Arch{specs.ArchX86_64},
	}
	add := func(names []string, ret *uint, args ...specs.LinuxSeccompArg) {
		s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{
			Names: names, Action: specs.ActErrno, ErrnoRet: ret, Args: args,
		})
	}
	add(blockedSyscalls, eperm)
	// clone3 passes its flags in a struct seccomp cannot read, so it cannot
	// be argument-filtered; ENOSYS makes glibc (>= 2.34) fall back to clone,
	// which is filtered below.
	add([]string{"clone3"}, errnoRet(unix.ENOSYS))
	for _, f := range nsFlags {
		// One rule per flag: runc ORs conditions on the same argument, so
		// "flags & f == f" per rule gives "any namespace flag set".
		add([]string{"clone"}, eperm, specs.LinuxSeccompArg{Index: 0, Value: f, ValueTwo: f, Op: specs.OpMaskedEqual})
		add([]string{"unshare"}, eperm, specs.LinuxSeccompArg{Index: 0, Value: f, ValueTwo: f, Op: specs.OpMaskedEqual})
	}
	add([]string{"unshare"}, eperm, specs.LinuxSeccompArg{Index: 0, Value: cloneNewTime, ValueTwo: cloneNewTime, Op: specs.OpMaskedEqual})
	add([]string{"socket"}, eperm, specs.LinuxSeccompArg{Index: 0, Value: maxAllowedFamily, Op: specs.OpGreaterThan})
	for _, fam := range blockedLowFamilies {
		add([]string{"socket"}, eperm, specs.LinuxSeccompArg{Index: 0, Value: lo32, ValueTwo: fam, Op: specs.OpMaskedEqual})
	}
	for _, bit := range blockedPersonalityBits {
		add([]string{"personality"}, eperm, specs.LinuxSeccompArg{Index: 0, Value: 0x80000000 | bit, ValueTwo: bit, Op: specs.OpMaskedEqual})
	}
	return s
}
