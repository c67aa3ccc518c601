package agent

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

// account is a resolved sandbox user.
type account struct {
	name   string
	uid    uint32
	gid    uint32
	home   string
	groups []uint32 // supplementary groups, from /etc/group
}

// maxEtcFile bounds how much of /etc/passwd or /etc/group is read. The files
// belong to the sandbox; a huge one must not make the agent allocate without
// bound.
const maxEtcFile = 8 << 20

func readEtc(etcDir, name string) ([]byte, error) {
	f, err := os.Open(filepath.Join(etcDir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxEtcFile))
}

// lookupUser resolves spec (a name or a numeric uid) from the sandbox's own
// /etc/passwd and /etc/group. We parse the files ourselves rather than use
// NSS: this is a static binary, and inside the sandbox the files are the
// sandbox's own, which is exactly what we want to read.
func lookupUser(etcDir, spec string) (account, error) {
	if spec == "" || strings.ContainsAny(spec, ":\n\x00") {
		return account{}, errdefs.InvalidArgument("invalid user %q", spec)
	}
	numeric, numErr := strconv.ParseUint(spec, 10, 32)
	passwd, _ := readEtc(etcDir, "passwd")
	var acct account
	found := false
	forEachLine(passwd, func(f []string) bool {
		if len(f) < 7 {
			return true
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			return true
		}
		if f[0] == spec || (numErr == nil && uid == numeric) {
			acct = account{name: f[0], uid: uint32(uid), gid: uint32(gid), home: f[5]}
			found = true
			return false
		}
		return true
	})
	if !found {
		if numErr != nil {
			return account{}, errdefs.NotFound("user %q not found in the sandbox's /etc/passwd", spec)
		}
		// A bare uid that has no passwd entry is allowed (as in docker
		// run -u 1234); its group is the same number, never root's.
		return account{name: spec, uid: uint32(numeric), gid: uint32(numeric), home: "/"}, nil
	}
	if acct.home == "" {
		acct.home = "/"
	}
	group, _ := readEtc(etcDir, "group")
	forEachLine(group, func(f []string) bool {
		if len(f) < 4 {
			return true
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil || uint32(gid) == acct.gid {
			return true
		}
		for _, m := range strings.Split(f[3], ",") {
			if m == acct.name {
				acct.groups = append(acct.groups, uint32(gid))
				break
			}
		}
		return true
	})
	return acct, nil
}

// forEachLine calls fn with the colon-separated fields of each non-comment
// line until fn returns false.
func forEachLine(data []byte, fn func([]string) bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if !fn(strings.Split(line, ":")) {
			return
		}
	}
}

// defaultAccount is the --default-user, or root when the image has no such
// user (a plain busybox or distroless image).
func (s *Server) defaultAccount() account {
	if a, err := lookupUser(s.cfg.EtcDir, s.cfg.DefaultUser); err == nil {
		return a
	}
	if a, err := lookupUser(s.cfg.EtcDir, "0"); err == nil && a.uid == 0 {
		return a
	}
	return account{name: "root", home: "/root"}
}

// resolveUser is lookupUser with the default applied.
func (s *Server) resolveUser(spec string) (account, error) {
	if spec == "" {
		return s.defaultAccount(), nil
	}
	return lookupUser(s.cfg.EtcDir, spec)
}
