package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// CgroupRoot is where cgroup hierarchies are mounted. A variable for tests.
var CgroupRoot = "/sys/fs/cgroup"

// Unified reports whether the host runs cgroup v2 only (runc then uses the
// v2 manager). A hybrid host (v1 controllers plus cgroup2 at
// /sys/fs/cgroup/unified without controllers) reports false: runc applies
// limits through v1 there.
func Unified() bool {
	var st unix.Statfs_t
	return unix.Statfs(CgroupRoot, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// OOMKilled reports whether the kernel OOM killer killed a process in the
// container's memory cgroup. cgroupsPath is the spec's CgroupsPath ("" means
// "/berth/<id>"). Call it before Delete: deleting the container removes the
// cgroup and its counters. v2 reads memory.events oom_kill; v1 reads
// memory.oom_control oom_kill (kernel >= 4.13).
func OOMKilled(id, cgroupsPath string) (bool, error) {
	if cgroupsPath == "" {
		cgroupsPath = "/berth/" + id
	}
	cgroupsPath = filepath.Clean("/" + cgroupsPath)
	var file string
	if Unified() {
		file = filepath.Join(CgroupRoot, cgroupsPath, "memory.events")
	} else {
		file = filepath.Join(CgroupRoot, "memory", cgroupsPath, "memory.oom_control")
	}
	n, err := readKey(file, "oom_kill")
	if errors.Is(err, fs.ErrNotExist) {
		return false, errdefs.NotFound("memory cgroup of %s not found (%s)", id, file)
	}
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

// readKey reads "key value" lines (memory.events, memory.oom_control).
func readKey(file, key string) (int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no %s line (kernel too old?)", file, key)
}

// hierarchies returns the mount points of every cgroup (v1) and cgroup2
// filesystem: on a hybrid host that is one per v1 controller plus the
// unified one; on a v2 host just /sys/fs/cgroup.
func hierarchies() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, p := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(p) < 1 || (p[0] != "cgroup" && p[0] != "cgroup2") {
			continue
		}
		if strings.HasPrefix(f[4], CgroupRoot) {
			out = append(out, f[4])
		}
	}
	return out, nil
}

// CleanupCgroups removes leftover container cgroups under cgroupsParent
// (e.g. "/berth") in every hierarchy, except the ids in keep: the processes
// in them are killed first (cgroup.kill on v2, SIGKILL to each listed pid on
// v1, after thawing a frozen cgroup so the kill can land). Used by reconcile
// after a daemon crash.
func CleanupCgroups(cgroupsParent string, keep map[string]bool) error {
	parent := filepath.Clean("/" + cgroupsParent)
	if parent == "/" {
		return errdefs.InvalidArgument("refusing to clean up the root cgroup")
	}
	roots, err := hierarchies()
	if err != nil {
		return err
	}
	// Collect first, then act in phases across all hierarchies: a process
	// frozen by the v1 freezer hierarchy cannot die from the SIGKILL sent
	// while walking the cpu hierarchy, so every cgroup is thawed before
	// anything is killed, and everything is killed before any rmdir waits.
	var dirs []string
	var errs []error
	for _, root := range roots {
		dir := filepath.Join(root, parent)
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ents {
			if e.IsDir() && !keep[e.Name()] {
				dirs = append(dirs, subtree(filepath.Join(dir, e.Name()))...)
			}
		}
	}
	for _, d := range dirs {
		_ = os.WriteFile(filepath.Join(d, "freezer.state"), []byte("THAWED"), 0)
		_ = os.WriteFile(filepath.Join(d, "cgroup.freeze"), []byte("0"), 0)
	}
	for _, d := range dirs {
		killAll(d)
	}
	// subtree lists parents before children; remove children first.
	for i := len(dirs) - 1; i >= 0; i-- {
		errs = append(errs, rmdirWait(dirs[i]))
	}
	return errors.Join(errs...)
}

// subtree returns dir and all cgroups below it, parents first.
func subtree(dir string) []string {
	out := []string{dir}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, subtree(filepath.Join(dir, e.Name()))...)
		}
	}
	return out
}

// killAll kills every process in the cgroup: cgroup.kill on v2 (atomic, no
// fork race), SIGKILL to each listed pid on v1.
func killAll(dir string) {
	if os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) == nil {
		return
	}
	for _, pid := range procs(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// rmdirWait removes an empty cgroup, re-killing late forks until the
// processes are gone (bounded).
func rmdirWait(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		killAll(dir)
		time.Sleep(10 * time.Millisecond)
	}
}

func procs(dir string) []int {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil && p > 0 {
			pids = append(pids, p)
		}
	}
	return pids
}
