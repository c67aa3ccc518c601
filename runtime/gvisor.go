package runtime

// GVisorFlags are runsc's global flags for berth sandboxes:
//   - platform systrap: seccomp-trap based, needs no KVM (hosts and VMs
//     without nested virtualisation).
//   - network sandbox: gVisor's own network stack (netstack) inside the
//     sentry, configured from the interfaces and routes of the netns named
//     in the spec (berth's veth); the sandbox's sockets never reach the
//     host kernel's network stack. See GVisorStartVia.
//   - host-uds create: the agent's socket in the bind-mounted socket dir is
//     a real host unix socket the daemon can dial; only sockets created in
//     mounts from the spec are affected.
//   - overlay2 none: the root filesystem is berth's overlay (writes reach
//     the sandbox's upper, its disk quota and snapshots); runsc's default
//     would put a memory-backed overlay on top and lose them at sleep.
func GVisorFlags() []string {
	return []string{"--platform=systrap", "--network=sandbox", "--host-uds=create", "--overlay2=none"}
}

// GVisorStartVia runs `runsc start` in a private mount namespace with
// /proc/sys/net hidden. runsc (2024-07) refuses --network=sandbox when it
// thinks it is in the host's network namespace, which it detects by the
// existence of /proc/sys/net/core/rmem_default; since Linux 6.x that sysctl
// exists in every network namespace, so the check misfires on the sandbox's
// own netns. Hiding the directory from that one command (nothing else
// there reads it; the sandbox's netns is joined by path) restores the
// intended behaviour. It needs util-linux's unshare and mount.
func GVisorStartVia() []string {
	return []string{"unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o size=4k,ro tmpfs /proc/sys/net && exec "$0" "$@"`}
}
