package runtime

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The seccomp profile is an allowlist (see doc.go). A syscall is allowed
// only if it is named in allowedSyscalls or matches one of the argument
// rules below; the blocked syscalls fail with EPERM; anything else fails
// with ENOSYS, so a program probing a syscall this profile does not know
// (one added by a newer kernel) takes its fallback path.

// allowedSyscalls are allowed whatever their arguments: the container
// ecosystem's default profile's unconditional x86_64 set, plus the calls it
// allows for capabilities berth grants (chroot for SYS_CHROOT) or for
// kernels >= 4.8 (ptrace, process_vm_*). Names libseccomp does not know
// are skipped by the runtime and fall to the default ENOSYS.
var allowedSyscalls = []string{
	"accept", "accept4", "access", "adjtimex", "alarm", "arch_prctl", "bind", "brk",
	"cachestat", "capget", "capset", "chdir", "chmod", "chown", "chroot",
	"clock_getres", "clock_gettime", "clock_nanosleep", "close", "close_range",
	"connect", "copy_file_range", "creat", "dup", "dup2", "dup3",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
	"epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2",
	"execve", "execveat", "exit", "exit_group", "faccessat", "faccessat2",
	"fadvise64", "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat",
	"fchmodat2", "fchown", "fchownat", "fcntl", "fdatasync", "fgetxattr",
	"flistxattr", "flock", "fork", "fremovexattr", "fsetxattr", "fstat", "fstatfs",
	"fsync", "ftruncate", "futex", "futex_requeue", "futex_wait", "futex_waitv",
	"futex_wake", "futimesat", "get_mempolicy", "get_robust_list", "get_thread_area",
	"getcpu", "getcwd", "getdents", "getdents64", "getegid", "geteuid", "getgid",
	"getgroups", "getitimer", "getpeername", "getpgid", "getpgrp", "getpid",
	"getppid", "getpriority", "getrandom", "getresgid", "getresuid", "getrlimit",
	"getrusage", "getsid", "getsockname", "getsockopt", "gettid", "gettimeofday",
	"getuid", "getxattr", "getxattrat", "inotify_add_watch", "inotify_init",
	"inotify_init1", "inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents",
	"io_pgetevents", "io_setup", "io_submit", "ioctl", "ioprio_get", "ioprio_set",
	"kill", "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self",
	"lchown", "lgetxattr", "link", "linkat", "listen", "listmount", "listxattr",
	"listxattrat", "llistxattr", "lremovexattr", "lseek", "lsetxattr", "lstat",
	"madvise", "map_shadow_stack", "mbind", "membarrier", "memfd_create",
	"memfd_secret", "mincore", "mkdir", "mkdirat", "mknod", "mknodat", "mlock",
	"mlock2", "mlockall", "mmap", "mprotect", "mq_getsetattr", "mq_notify",
	"mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink", "mremap", "mseal",
	"msgctl", "msgget", "msgrcv", "msgsnd", "msync", "munlock", "munlockall",
	"munmap", "nanosleep", "newfstatat", "open", "openat", "openat2", "pause",
	"pidfd_getfd", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc",
	"pkey_free", "pkey_mprotect", "poll", "ppoll", "prctl", "pread64", "preadv",
	"preadv2", "prlimit64", "process_madvise", "process_mrelease",
	"process_vm_readv", "process_vm_writev", "pselect6", "ptrace", "pwrite64",
	"pwritev", "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv",
	"recvfrom", "recvmmsg", "recvmsg", "remap_file_pages", "removexattr",
	"removexattrat", "rename", "renameat", "renameat2", "restart_syscall", "rmdir", "rseq",
	"rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
	"rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo",
	"sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity",
	"sched_getattr", "sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
	"sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler",
	"sched_yield", "seccomp", "select", "semctl", "semget", "semop", "semtimedop",
	"sendfile", "sendmmsg", "sendmsg", "sendto", "set_mempolicy",
	"set_mempolicy_home_node", "set_robust_list", "set_thread_area",
	"set_tid_address", "setfsgid", "setfsuid", "setgid", "setgroups", "setitimer",
	"setpgid", "setpriority", "setregid", "setresgid", "setresuid", "setreuid",
	"setrlimit", "setsid", "setsockopt", "setuid", "setxattr", "setxattrat",
	"shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd",
	"signalfd4", "socketpair", "splice", "stat", "statfs", "statmount", "statx",
	"symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "sysinfo", "tee",
	"tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun",
	"timer_gettime", "timer_settime", "timerfd_create", "timerfd_gettime",
	"timerfd_settime", "times", "tkill", "truncate", "umask", "uname", "unlink",
	"unlinkat", "utime", "utimensat", "utimes", "vfork", "vmsplice", "wait4",
	"waitid", "write", "writev",
}

// blockedSyscalls fail with EPERM whatever their arguments. Most are also
// refused by the dropped capabilities; they are listed so the refusal does
// not depend on one wall, and each names the attack it removes.
var blockedSyscalls = []string{
	// Mount API: remounting /proc or /sys rw, or mounting over masked paths
	// (CVE-2019-19921 class, CVE-2022-0492 cgroupfs release_agent).
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
	"sysfs", "_sysctl", "fanotify_init", "sethostname", "setdomainname",
	"modify_ldt", "kcmp",
}

// Namespace-creating clone/unshare flags. CLONE_NEWUSER is the important one:
// creating a user namespace needs no capability, and inside it a process
// holds every capability over the new namespaces, which reopens mount,
// netfilter and other code paths (CVE-2022-0185, CVE-2023-32233). That holds
// for a nested user namespace inside the sandbox's own one too, so they stay
// refused even when the sandbox runs in a user namespace (see doc.go). The
// other flags need CAP_SYS_ADMIN, which is not granted.
var nsFlags = []uint64{
	unix.CLONE_NEWNS, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER,
	unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWCGROUP,
}

const cloneNewTime = 0x80 // unshare only: for clone() bits 0-7 are the exit signal

// Socket families allowed: AF_UNIX(1), AF_INET(2), AF_INET6(10),
// AF_NETLINK(16), AF_PACKET(17, useless without CAP_NET_RAW). Everything else
// (AF_ALG=38, AF_VSOCK=40, AF_TIPC, AF_RDS, AF_KEY, ...) is rarely needed and
// is where socket-family LPEs live (CVE-2021-43267 TIPC, CVE-2010-3904 RDS,
// CVE-2024-26581 ...).
var allowedFamilies = []uint64{1, 2, 10, 16, 17}

// blockedLowFamilies are the families 0-17 not allowed, refused one by one
// with EPERM; everything above 17 is refused with one GT rule.
var blockedLowFamilies = []uint64{3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15}

const maxAllowedFamily = 17

// allowedPersonalities: PER_LINUX, PER_LINUX32, UNAME26 and the query
// 0xffffffff (setarch, gdb). READ_IMPLIES_EXEC and MMAP_PAGE_ZERO (a
// NULL-deref exploit aid) are refused.
var allowedPersonalities = []uint64{0x0, 0x8, 0x20000, 0xffffffff}

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
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: errnoRet(unix.ENOSYS),
		// Only the native ABI: the filter's bad-arch action kills the thread
		// that enters through int 0x80 (i386 ABI) or x32, whose syscall
		// numbers differ and would otherwise walk past every rule below.
		Architectures: []specs.Arch{specs.ArchX86_64},
	}
	rule := func(names []string, act specs.LinuxSeccompAction, ret *uint, args ...specs.LinuxSeccompArg) {
		s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: names, Action: act, ErrnoRet: ret, Args: args})
	}
	rule(allowedSyscalls, specs.ActAllow, nil)
	rule(blockedSyscalls, specs.ActErrno, eperm)
	// clone3 passes its flags in a struct seccomp cannot read, so it cannot
	// be argument-filtered; ENOSYS makes glibc (>= 2.34) fall back to clone,
	// which is filtered below.
	rule([]string{"clone3"}, specs.ActErrno, errnoRet(unix.ENOSYS))
	var all uint64
	for _, f := range nsFlags {
		all |= f
		// One rule per flag: runc ORs rules for the same syscall, so
		// "flags & f == f" per rule gives "any namespace flag set".
		rule([]string{"clone", "unshare"}, specs.ActErrno, eperm, specs.LinuxSeccompArg{Index: 0, Value: f, ValueTwo: f, Op: specs.OpMaskedEqual})
	}
	rule([]string{"clone"}, specs.ActAllow, nil, specs.LinuxSeccompArg{Index: 0, Value: all, ValueTwo: 0, Op: specs.OpMaskedEqual})
	rule([]string{"unshare"}, specs.ActErrno, eperm, specs.LinuxSeccompArg{Index: 0, Value: cloneNewTime, ValueTwo: cloneNewTime, Op: specs.OpMaskedEqual})
	rule([]string{"unshare"}, specs.ActAllow, nil, specs.LinuxSeccompArg{Index: 0, Value: all | cloneNewTime, ValueTwo: 0, Op: specs.OpMaskedEqual})
	for _, fam := range allowedFamilies {
		rule([]string{"socket"}, specs.ActAllow, nil, specs.LinuxSeccompArg{Index: 0, Value: lo32, ValueTwo: fam, Op: specs.OpMaskedEqual})
	}
	rule([]string{"socket"}, specs.ActErrno, eperm, specs.LinuxSeccompArg{Index: 0, Value: maxAllowedFamily, Op: specs.OpGreaterThan})
	for _, fam := range blockedLowFamilies {
		rule([]string{"socket"}, specs.ActErrno, eperm, specs.LinuxSeccompArg{Index: 0, Value: lo32, ValueTwo: fam, Op: specs.OpMaskedEqual})
	}
	for _, p := range allowedPersonalities {
		rule([]string{"personality"}, specs.ActAllow, nil, specs.LinuxSeccompArg{Index: 0, Value: p, Op: specs.OpEqualTo})
	}
	rule([]string{"personality"}, specs.ActErrno, eperm, specs.LinuxSeccompArg{Index: 0, Value: 0x0400000, ValueTwo: 0x0400000, Op: specs.OpMaskedEqual})
	rule([]string{"personality"}, specs.ActErrno, eperm, specs.LinuxSeccompArg{Index: 0, Value: 0x0100000, ValueTwo: 0x0100000, Op: specs.OpMaskedEqual})
	return s
}
