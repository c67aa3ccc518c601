package rootfs

import (
	"bufio"
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

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
