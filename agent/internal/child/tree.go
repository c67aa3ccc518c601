package child

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// KillTree SIGKILLs an exec's whole process tree: its process group and
// every descendant found through /proc ppid links. The process group alone
// is not enough: a child may call setsid() or setpgid() to leave it (a
// daemonizing server, `setsid sleep 100 &`), and would survive a timeout.
//
// The tree is frozen with SIGSTOP first, then killed. Killing top-down
// without freezing would let a descendant's children be re-parented (to
// PID 1) before we see them, losing the link; a stopped process cannot fork,
// so the walk converges. What it cannot find is a process that already
// double-forked away before the kill (it is then PID 1's child); only the
// sandbox's cgroup bounds those.
func KillTree(root int) {
	syscall.Kill(-root, syscall.SIGSTOP)
	syscall.Kill(root, syscall.SIGSTOP)
	tree := map[int]bool{root: true}
	for pass := 0; pass < 16; pass++ {
		children := Children()
		added := false
		frontier := make([]int, 0, len(tree))
		for pid := range tree {
			frontier = append(frontier, pid)
		}
		for len(frontier) > 0 {
			pid := frontier[len(frontier)-1]
			frontier = frontier[:len(frontier)-1]
			for _, c := range children[pid] {
				if !tree[c] {
					tree[c] = true
					syscall.Kill(c, syscall.SIGSTOP)
					frontier = append(frontier, c)
					added = true
				}
			}
		}
		if !added {
			break
		}
	}
	syscall.Kill(-root, syscall.SIGKILL)
	for pid := range tree {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Children maps each pid to its children, from /proc/*/stat.
func Children() map[int][]int {
	children := make(map[int][]int)
	d, err := os.Open("/proc")
	if err != nil {
		return children
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		ppid, _, ok := Stat(pid)
		if ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	return children
}

// Stat returns a process's parent pid and state letter.
func Stat(pid int) (ppid int, state byte, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) S ppid ..."; comm may contain spaces and parentheses,
	// so parse from the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0, 0, false
	}
	fields := bytes.Fields(data[i+2:])
	if len(fields) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(fields[1]))
	if err != nil {
		return 0, 0, false
	}
	return ppid, fields[0][0], true
}
