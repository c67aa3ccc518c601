package network

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ensureSharedDir creates dir and makes it a shared mount point, the way
// `ip netns` treats /run/netns. Netns bind mounts made under it then
// propagate to (and, more importantly, their unmounts propagate into) mount
// namespaces copied later, so a process that unshared its mount namespace
// while a sandbox ran cannot keep that sandbox's netns alive forever after
// Teardown.
func ensureSharedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create netns dir: %w", err)
	}
	err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	// Not a mount point yet: bind it onto itself, then share it.
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	return nil
}

// newNetNS creates a network namespace, pins it by bind-mounting it at path,
// and returns a handle to it plus a netlink socket that lives inside it (a
// netlink socket stays in the netns it was created in, so later requests need
// no thread switching).
//
// The namespace switch happens on a dedicated, locked OS thread. If that
// thread cannot be moved back to the host netns it is left locked, and Go
// destroys it when the goroutine exits, rather than letting a later
// goroutine run in a sandbox's namespace.
func newNetNS(path string, host netns.NsHandle) (netns.NsHandle, *netlink.Handle, error) {
	type result struct {
		ns  netns.NsHandle
		h   *netlink.Handle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ns, h, err := inNewNetNS(path)
		if serr := netns.Set(host); serr != nil {
			// Thread stays locked and dies with this goroutine.
			if h != nil {
				h.Close()
			}
			if ns.IsOpen() {
				ns.Close()
			}
			_ = removeNetNS(path)
			ch <- result{err: errors.Join(err, fmt.Errorf("return to host netns: %w", serr))}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{ns, h, err}
	}()
	r := <-ch
	return r.ns, r.h, r.err
}

// inNewNetNS runs on a locked thread and leaves it in the new namespace.
func inNewNetNS(path string) (ns netns.NsHandle, h *netlink.Handle, err error) {
	ns = netns.None()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return ns, nil, fmt.Errorf("unshare netns: %w", err)
	}
	// /proc/sys/net resolves against the netns of the calling thread, so
	// these writes affect only the new namespace (the tests check the host
	// value is untouched). Disabling IPv6 before eth0 exists means the
	// sandbox never gets a link-local v6 address, so the v4-only rule set
	// is complete.
	for _, p := range []string{
		"/proc/sys/net/ipv6/conf/all/disable_ipv6",
		"/proc/sys/net/ipv6/conf/default/disable_ipv6",
	} {
		if err := os.WriteFile(p, []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return ns, nil, fmt.Errorf("disable ipv6 in sandbox netns: %w", err)
		}
	}
	// ICMP echo without CAP_NET_RAW: ping works through ping sockets for
	// every group. Set here, not by the runtime: a sandbox in its own user
	// namespace cannot write the sysctls of a netns the host owns.
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0); err != nil {
		return ns, nil, fmt.Errorf("ping_group_range in sandbox netns: %w", err)
	}
	// Ports below 1024 need CAP_NET_BIND_SERVICE in the user namespace that
	// owns the netns, the host's; the sandbox's root holds it only in its
	// own. Every port of the sandbox's own netns is its to bind (as
	// container engines do by default).
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_unprivileged_port_start", []byte("0"), 0); err != nil {
		return ns, nil, fmt.Errorf("ip_unprivileged_port_start in sandbox netns: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return ns, nil, fmt.Errorf("create netns file: %w", err)
	}
	f.Close()
	if err := unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, ""); err != nil {
		os.Remove(path)
		return ns, nil, fmt.Errorf("bind-mount netns: %w", err)
	}
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = removeNetNS(path)
		return ns, nil, fmt.Errorf("open new netns: %w", err)
	}
	ns = netns.NsHandle(fd)
	h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		ns.Close()
		_ = removeNetNS(path)
		return netns.None(), nil, fmt.Errorf("netlink socket in sandbox netns: %w", err)
	}
	return ns, h, nil
}

// removeNetNS unmounts and deletes a pinned netns file. Missing or already
// unmounted files are fine: Teardown must be idempotent.
func removeNetNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns file %s: %w", path, err)
	}
	return nil
}

// isNetNSFile reports whether path is a bind-mounted network namespace (as
// opposed to a plain file left by a crash between create and mount).
func isNetNSFile(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}
