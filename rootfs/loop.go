package rootfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// attachLoop binds file to a free loop device with autoclear set, mounts the
// device at dir as btrfs and only then closes the device fd, so the loop
// device is released automatically when the filesystem is unmounted (no
// stale /dev/loopN after a crash-free Shutdown).
func attachAndMount(file, dir, opts string) error {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open loop-control: %w", err)
	}
	defer ctl.Close()
	back, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer back.Close()
	for attempt := 0; attempt < 16; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lf, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(back.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], file)
		if err := unix.IoctlLoopConfigure(int(lf.Fd()), &cfg); err != nil {
			lf.Close()
			if errors.Is(err, unix.EBUSY) { // raced with another user of loop-control
				continue
			}
			return fmt.Errorf("configure %s for %s: %w", dev, file, err)
		}
		err = unix.Mount(dev, dir, "btrfs", unix.MS_NOATIME, opts)
		lf.Close() // autoclear: detaches now if the mount failed, at umount otherwise
		if err != nil {
			return fmt.Errorf("mount %s (%s) at %s: %w", file, dev, dir, err)
		}
		return nil
	}
	return errors.New("no free loop device after 16 attempts")
}

// mkfs formats file as btrfs. Single profiles: the image lives on the host's
// own disk, so DUP metadata would only double the writes.
func mkfs(ctx context.Context, file string) error {
	cmd := exec.CommandContext(ctx, "mkfs.btrfs", "-q", "-f", "-m", "single", "-d", "single", file)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("mkfs.btrfs not found (install btrfs-progs): %w", err)
		}
		return fmt.Errorf("mkfs.btrfs %s: %v: %s", file, err, tail(out, 512))
	}
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// mountEntry is the part of a /proc/self/mountinfo line we use.
type mountEntry struct {
	Point, FSType, Source, SuperOpts string
}

// mountRoot reports whether p is the root of a mount, from statx's
// STATX_ATTR_MOUNT_ROOT, without reading /proc/self/mountinfo: the kernel
// formats every mount of the host for that read (paths, options), so its
// cost grows with the number of sandboxes, and a burst of starts and
// destroys made it quadratic. A path that does not exist is not a mount
// point. known is false when the kernel cannot tell (no attribute, an
// error other than ENOENT); the caller then reads mountinfo.
func mountRoot(p string) (root, known bool) {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st)
	if errors.Is(err, unix.ENOENT) {
		return false, true
	}
	if err != nil || st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, false
	}
	return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, true
}

// mounts parses /proc/self/mountinfo. Mount points are unescaped (\040 etc.).
func mounts() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		sep := strings.Index(line, " - ")
		if sep < 0 {
			continue
		}
		pre, post := strings.Fields(line[:sep]), strings.Fields(line[sep+3:])
		if len(pre) < 5 || len(post) < 2 {
			continue
		}
		e := mountEntry{Point: unescape(pre[4]), FSType: post[0], Source: post[1]}
		if len(post) > 2 {
			e.SuperOpts = post[2]
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOct(s[i+1]) && isOct(s[i+2]) && isOct(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOct(c byte) bool { return c >= '0' && c <= '7' }
