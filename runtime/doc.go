// Package runtime runs sandbox containers through an OCI runtime binary and
// builds the OCI config that decides their security posture.
//
// # Driver
//
// OCI speaks the runc command-line contract (create, start, kill, delete,
// state, list, pause, resume, update) with a private --root, so runc, crun
// and runsc are interchangeable. Create passes a log file in the bundle as
// the container's stdout/stderr (files, never pipes: a pipe would be held
// open by the container) and /dev/null as stdin; runc's own log is
// bundle/runc.log and the tail of its error lines goes into the returned
// error. Delete of an unknown id and Kill of a stopped container succeed, so
// reconcile and retries can repeat them.
//
// # Posture (checklist #12-#17)
//
// Never privileged. Root in the sandbox is uid 0 without a user namespace,
// so every other layer matters:
//   - Capabilities: Docker's default set minus NET_RAW and MKNOD (see
//     Capabilities for the reason behind each one kept).
//   - no_new_privs: setuid binaries and file capabilities cannot raise
//     privileges.
//   - Namespaces: pid, mount, uts, ipc, network (a fresh empty one or the
//     path the network package prepared) and cgroup.
//   - Masked paths (/proc/kcore, /proc/keys, /proc/timer_list, /sys/firmware,
//     powercap ...) and read-only paths (/proc/sys, /proc/sysrq-trigger, ...);
//     /sys and the namespaced cgroupfs are mounted read-only.
//   - /dev is a small tmpfs with runc's default devices only; the device
//     cgroup denies all others; /dev/pts is a new instance; /dev/shm is
//     size-capped.
//   - RLIMIT_NOFILE set; oom_score_adj 500 so the kernel's global OOM killer
//     prefers sandbox processes to the daemon.
//
// # Seccomp: default-allow with an explicit deny list
//
// Chosen over an allowlist for now because sandboxes run arbitrary developer
// tooling (language runtimes, debuggers, build systems) and an allowlist that
// misses a syscall breaks a user's program in ways that are hard to
// diagnose; the denied syscalls are the ones with a record of escapes or
// kernel LPEs, or with host-wide effect, and most of them are also refused
// by the dropped capabilities, so seccomp is a second wall. Where seccomp is
// the only wall (keyctl, unshare/clone(CLONE_NEWUSER), io_uring, userfaultfd
// in user mode, AF_ALG/AF_VSOCK and other rare socket families) the tests
// show it with a negative control. The cost of default-allow: a syscall that
// libseccomp does not know by name, or one added to a future kernel, is
// allowed until listed. Only SCMP_ARCH_X86_64 is listed, so the i386
// (int 0x80) and x32 ABIs hit the filter's bad-arch action: the calling
// thread is killed with SIGSYS (libseccomp's default; the runtime spec has no
// field to make it kill the whole process, so a multi-threaded caller lingers
// with that one thread dead; the syscall never runs). clone3 returns ENOSYS (its flags live in memory seccomp cannot
// read; libc falls back to clone, which is filtered). ptrace is allowed:
// since Linux 4.8 it cannot be used to bypass seccomp, it only reaches
// processes inside the sandbox's pid namespace, and debuggers and strace
// are tools agents use; the agent is not a trust anchor (the host treats its
// replies as untrusted), so a sandbox process tracing it gains nothing.
//
// # Cgroups
//
// Limits go in the spec (cpu quota/period and shares, memory limit with
// memory+swap equal so nothing swaps, pids limit) and runc applies them with
// its v1 or v2 manager, whichever the host has. On a hybrid host (v1
// controllers under /sys/fs/cgroup/<ctrl>, an empty cgroup2 at
// /sys/fs/cgroup/unified) that is v1. OOMKilled and CleanupCgroups read and
// clean both layouts themselves.
package runtime
