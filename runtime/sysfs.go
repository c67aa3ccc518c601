package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/weaken"
)

// MountSysfs mounts a read-only sysfs that belongs to the network namespace
// at netnsPath on target. A container in its own user namespace cannot mount
// sysfs itself when it joins a network namespace the host owns (the kernel
// requires the mounter to own the netns), so the daemon mounts it from a
// thread inside that netns (so /sys/class/net shows the sandbox's own
// interfaces, not the host's) and the spec bind-mounts it at /sys.
func MountSysfs(netnsPath, target string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open(netnsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns: %w", err)
			return
		}
		flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		if weaken.Off(weaken.MaskedPaths) {
			flags &^= unix.MS_RDONLY
		}
		errc <- unix.Mount("sysfs", target, "sysfs", flags, "")
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("mount sysfs for the sandbox: %w", err)
	}
	return nil
}

// UnmountUnder unmounts every mount at or below dir (latest first,
// detaching busy ones), so that dir can be removed without recursing into
// a mounted filesystem.
func UnmountUnder(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil // nothing can be mounted below a path that is not there (and no mountinfo read, which costs more with every mount on the host)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	f.Close()
	var errs []error
	for i := len(points) - 1; i >= 0; i-- {
		if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", points[i], err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for space etc.).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
