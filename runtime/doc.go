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
// Never privileged. With isolation "runc" (the default):
//   - User namespace: sandbox ids 0..65535 are host ids HostID.. (a range of
//     its own per sandbox, allocated by the controller). Root in the sandbox
//     holds no capability over anything the host owns; its netns belongs to
//     the host's user namespace, so not even its own network config.
//     The root filesystem's layers are idmapped mounts (rootfs package), so
//     files keep in-sandbox ids on disk. sysfs cannot be mounted from the
//     user namespace into a host-owned netns; the daemon mounts one from a
//     thread inside the sandbox's netns (MountSysfs) and the spec
//     bind-mounts it read-only at /sys.
//   - Capabilities: Docker's default set minus NET_RAW and MKNOD (see
//     Capabilities for the reason behind each one kept), all of them
//     relative to the sandbox's user namespace.
//   - no_new_privs: setuid binaries and file capabilities cannot raise
//     privileges (sudo is the agent's, see agent/sudo.go).
//   - Namespaces: user, pid, mount, uts, ipc, network (the path the network
//     package prepared) and cgroup.
//   - Masked paths (/proc/kcore, /proc/keys, /proc/timer_list, /sys/firmware,
//     powercap ...) and read-only paths (/proc/sys, so core_pattern too,
//     /proc/sysrq-trigger, ...); /sys and the namespaced cgroupfs are
//     mounted read-only.
//   - Devices: DeviceAllowlist (deny all, then null, zero, full, random,
//     urandom, tty, console, ptmx, pts); /dev is a small tmpfs; /dev/pts a
//     new instance; /dev/shm size-capped.
//   - RLIMIT_NOFILE set; oom_score_adj 500 so the kernel's global OOM killer
//     prefers sandbox processes to the daemon.
//   - Fail closed: every step is in the spec, runc fails the create if it
//     cannot apply one, and VerifyPosture compares the running agent's
//     NoNewPrivs, Seccomp, CapBnd/CapEff and uid_map with the spec before
//     the sandbox is reported running.
//
// Each protection has a test-only switch (internal/weaken) that turns it
// off, for the adversarial suite's negative controls; the daemon warns
// loudly when one is set.
//
// # Seccomp: an allowlist
//
// The profile (seccomp.go) allows the container ecosystem default profile's
// unconditional x86_64 set plus what berth's capabilities imply (chroot)
// and what is safe since Linux 4.8 (ptrace, process_vm_*); clone and
// unshare only without namespace flags, socket only for AF_UNIX, AF_INET,
// AF_INET6, AF_NETLINK and AF_PACKET, personality only for the four
// harmless values. Blocked syscalls (mount API, setns, keyctl, bpf,
// perf_event_open, io_uring, userfaultfd, module and kexec calls,
// open_by_handle_at, host-wide clock/swap/reboot ...) return EPERM;
// anything the profile does not know returns ENOSYS, so a program probing
// a newer syscall takes its fallback. Nested user namespaces stay refused
// even though the sandbox itself runs in one: creating one hands the caller
// every capability over new mount and network namespaces, which is where
// the recent unprivileged LPEs live (CVE-2022-0185, CVE-2023-32233), and
// mount stays refused with it. Only SCMP_ARCH_X86_64 is listed, so the
// i386 (int 0x80) and x32 ABIs hit the filter's bad-arch action: the
// calling thread is killed with SIGSYS. clone3 returns ENOSYS (its flags
// live in memory seccomp cannot read; libc falls back to clone, which is
// filtered).
//
// # gVisor
//
// With isolation "gvisor" the same spec runs under runsc (GVisorFlags):
// the sentry is the boundary (a user-space kernel with its own seccomp
// filter on the host side), so the host user namespace map, the host-made
// sysfs and VerifyPosture do not apply; network is gVisor's netstack over
// the sandbox's veth.
//
// Selector runs runc and runsc side by side, each with its own --root:
// a marker file per gVisor container (written with the bundle) says which
// runtime owns an id, so kills, deletes and lists after a daemon restart
// reach the right one; Delete also clears runsc state an id left without
// its marker (a crash between the two).
//
// # Checkpoint and restore
//
// Checkpoint and Restore (checkpoint.go) drive `runc checkpoint` and
// `runc restore --detach` with berth's own CRIU (scripts/criu.sh) and a
// per-call CRIU config file for what runc cannot pass (nftables network
// lock, tcp-close). The image is one tar named by its sha256
// (checkpoint_image.go), with the host's CPU flags and the criu version in
// it; Restore verifies the digest before CRIU reads anything, refuses a
// host missing CPU flags, and runs VerifyPosture after CRIU, deleting the
// container when it fails. gVisor ids are refused with failed_precondition.
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
