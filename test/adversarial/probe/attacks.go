package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fdList reports the open fds of every process in the sandbox except the
// probe itself (checklist #12): pid -> comm and fd -> link target.
func fdList([]string) any {
	procs := map[string]any{}
	self := strconv.Itoa(os.Getpid())
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		fds := map[string]string{}
		fdEnts, err := os.ReadDir("/proc/" + e.Name() + "/fd")
		if err != nil {
			fds["error"] = errStr(err)
		}
		for _, f := range fdEnts {
			target, err := os.Readlink("/proc/" + e.Name() + "/fd/" + f.Name())
			switch {
			case errors.Is(err, fs.ErrNotExist):
				// Closed between the listing and the readlink: the agent
				// closes its copies of the probe's own pipe ends only once
				// the probe runs. A closed fd is no leak.
				continue
			case err != nil:
				target = "readlink: " + errStr(err) // not allowlisted: counts
			}
			fds[f.Name()] = target
		}
		procs[e.Name()] = map[string]any{"comm": strings.TrimSpace(string(comm)), "fds": fds}
	}
	return map[string]any{"procs": procs}
}

// outsideRoot walks ".." from dir until the top and reports whether the top
// is a different directory from "/" (then dir is outside the process root,
// as a leaked host fd used as cwd would be: CVE-2024-21626).
func outsideRoot(dir string) (bool, string) {
	var root, cur, up unix.Stat_t
	if err := unix.Stat("/", &root); err != nil {
		return false, errStr(err)
	}
	p := dir
	for i := 0; i < 512; i++ {
		if err := unix.Stat(p, &cur); err != nil {
			return false, errStr(err)
		}
		if err := unix.Stat(p+"/..", &up); err != nil {
			return false, errStr(err)
		}
		if cur.Dev == root.Dev && cur.Ino == root.Ino {
			return false, "reached /"
		}
		if cur.Dev == up.Dev && cur.Ino == up.Ino {
			return true, "reached a root that is not /"
		}
		p += "/.."
	}
	return false, "too deep"
}

// cwdCheck reports where the process's working directory is.
func cwdCheck() map[string]any {
	wd, err := os.Getwd()
	link, _ := os.Readlink("/proc/self/cwd")
	out, why := outsideRoot(".")
	return map[string]any{"getwd": wd, "getwd_err": errStr(err), "cwd_link": link, "outside": out, "why": why}
}

// cwdJail is the detector's negative control: chroot into a subdirectory
// while holding a directory fd of the old root, fchdir to it, and check.
// The working directory is then outside the root, which cwdCheck must see.
func cwdJail() map[string]any {
	fd, err := unix.Open("/", unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		return map[string]any{"error": errStr(err)}
	}
	os.MkdirAll("/tmp/probe-jail", 0o755)
	if err := unix.Chroot("/tmp/probe-jail"); err != nil {
		return map[string]any{"error": "chroot " + errStr(err)}
	}
	if err := unix.Fchdir(fd); err != nil {
		return map[string]any{"error": "fchdir " + errStr(err)}
	}
	return cwdCheck()
}

// exeWatch is the CVE-2019-5736 watcher (checklist #11). For DURATION it
// scans /proc for processes, holds an O_PATH fd of each one's executable,
// and keeps trying to reopen every held fd for writing (which succeeds once
// a binary is no longer running, unless it is read-only or sealed). It
// never writes a byte. "exewatch self" is the detector's negative control:
// it runs a copy of itself from a writable directory and catches it.
func exeWatch(args []string) any {
	dur := 10 * time.Second
	if len(args) > 0 && args[0] == "self" {
		self, _ := os.ReadFile("/proc/self/exe")
		victim := "/tmp/probe-victim"
		os.WriteFile(victim, self, 0o755)
		c := exec.Command(victim, "sleep", "500ms")
		if err := c.Start(); err != nil {
			return map[string]string{"error": errStr(err)}
		}
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/exe", c.Process.Pid), unix.O_PATH, 0)
		if err != nil {
			return map[string]string{"error": errStr(err)}
		}
		running := reopenWrite(fd)
		c.Wait()
		return map[string]string{"while running": running, "after exit": reopenWrite(fd)}
	}
	if len(args) > 0 {
		if d, err := time.ParseDuration(args[0]); err == nil {
			dur = d
		}
	}
	held := map[string][]int{} // target -> O_PATH fds
	results := map[string]map[string]int{}
	direct := map[string]string{}
	for _, p := range []string{"/.berth/bin/berth-agent", "/proc/1/exe"} {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		direct[p] = errStr(err)
	}
	self := strconv.Itoa(os.Getpid())
	seen := 0
	for deadline := time.Now().Add(dur); time.Now().Before(deadline); {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
				continue
			}
			fd, err := unix.Open("/proc/"+e.Name()+"/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
			// Only executables the host provides matter (the agent, a
			// runtime helper such as runc init, a memfd copy); the
			// sandbox's own binaries are the sandbox's to overwrite.
			hostSide := strings.HasPrefix(target, "/.berth/") || strings.Contains(target, "runc") ||
				strings.HasPrefix(target, "/memfd:") || strings.HasSuffix(target, " (deleted)")
			if !hostSide || strings.Contains(target, "probe") || len(held[target]) >= 16 {
				unix.Close(fd)
				continue
			}
			held[target] = append(held[target], fd)
			seen++
		}
		for target, fds := range held {
			for _, fd := range fds {
				r := reopenWrite(fd)
				if results[target] == nil {
					results[target] = map[string]int{}
				}
				results[target][r]++
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return map[string]any{"direct": direct, "reopen": results, "held": seen, "targets": len(held)}
}

func reopenWrite(fd int) string {
	w, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(w)
	}
	return errStr(err)
}

// race is the CVE-2018-15664 racer (checklist #8): in DIR it swaps a real
// directory "d" and a symlink "l" -> LINKTARGET with renameat2
// RENAME_EXCHANGE for DURATION, so a path through "d" sometimes crosses the
// symlink.
func race(args []string) any {
	if len(args) != 3 {
		return map[string]string{"error": "usage: race DIR LINKTARGET DURATION"}
	}
	dur, _ := time.ParseDuration(args[2])
	if err := os.Chdir(args[0]); err != nil {
		return map[string]string{"error": errStr(err)}
	}
	n := 0
	for deadline := time.Now().Add(dur); time.Now().Before(deadline); {
		for i := 0; i < 1000; i++ {
			if err := unix.Renameat2(unix.AT_FDCWD, "d", unix.AT_FDCWD, "l", unix.RENAME_EXCHANGE); err != nil {
				return map[string]string{"error": errStr(err)}
			}
			n++
		}
	}
	// Leave "d" a directory.
	if fi, err := os.Lstat("d"); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		unix.Renameat2(unix.AT_FDCWD, "d", unix.AT_FDCWD, "l", unix.RENAME_EXCHANGE)
	}
	return map[string]int{"swaps": n}
}

// connect dials each TCP target (host:port), sends a line and reads the
// answer for up to 2 s. Only an answer counts as reaching the target
// ("OK:" and its first bytes): a transparent proxy may accept the TCP
// handshake for a destination it then refuses ("connected:" and what
// followed). Otherwise the dial's errno or "timeout".
func connect(args []string) any {
	out := map[string]string{}
	for _, a := range args {
		c, err := net.DialTimeout("tcp", a, 2*time.Second)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				out[a] = "timeout"
			} else {
				out[a] = errStr(err)
			}
			continue
		}
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte("probe\r\n\r\n"))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		c.Close()
		if n > 0 {
			out[a] = "OK:" + strings.TrimSpace(strings.SplitN(string(buf[:n]), "\n", 2)[0])
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			out[a] = "connected:timeout"
		} else {
			out[a] = "connected:" + errStr(err)
		}
	}
	return out
}

// forkBomb forks sleeping children until fork fails or MAX is reached,
// then kills them, unless the second argument is "keep" (checklist #18).
func forkBomb(args []string) any {
	max := 100000
	if len(args) > 0 {
		max, _ = strconv.Atoi(args[0])
	}
	keep := len(args) > 1 && args[1] == "keep"
	var pids []int
	stop := "max"
	t0 := time.Now()
	for len(pids) < max {
		pid, err := syscall.ForkExec("/proc/self/exe", []string{"probe", "sleep"}, &syscall.ProcAttr{})
		if err != nil {
			stop = errStr(err)
			break
		}
		pids = append(pids, pid)
	}
	if keep {
		fmt.Printf("{\"forked\":%d,\"stop\":%q}\n", len(pids), stop)
		time.Sleep(time.Hour)
	}
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
	for _, p := range pids {
		var ws syscall.WaitStatus
		syscall.Wait4(p, &ws, 0, nil)
	}
	return map[string]any{"forked": len(pids), "stop": stop, "ms": time.Since(t0).Milliseconds()}
}

// threadBomb starts OS threads (each a goroutine locked to its thread)
// until MAX or until the kernel refuses one, which kills the Go runtime
// with "failed to create new OS thread"; the count printed so far survives
// on stdout (checklist #18).
func threadBomb(args []string) any {
	max := 100000
	if len(args) > 0 {
		max, _ = strconv.Atoi(args[0])
	}
	debug.SetMaxThreads(max + 100)
	n := 0
	for n < max {
		started := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(started)
			select {}
		}()
		<-started
		n++
		if n%50 == 0 {
			fmt.Printf("threads %d\n", n)
		}
	}
	return map[string]any{"threads": n, "stop": "max"}
}

// udp sends a datagram to each target and reports whether an echo came
// back within a second ("OK"), or the error.
func udp(args []string) any {
	out := map[string]string{}
	for _, a := range args {
		c, err := net.Dial("udp", a)
		if err != nil {
			out[a] = errStr(err)
			continue
		}
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("probe")); err != nil {
			out[a] = errStr(err)
		} else if _, err := c.Read(make([]byte, 16)); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				out[a] = "timeout"
			} else {
				out[a] = errStr(err)
			}
		} else {
			out[a] = "OK"
		}
		c.Close()
	}
	return out
}

// sleepFor sleeps for the duration in args[0] (default an hour).
func sleepFor(args []string) any {
	d := time.Hour
	if len(args) > 0 {
		if v, err := time.ParseDuration(args[0]); err == nil {
			d = v
		}
	}
	time.Sleep(d)
	return map[string]string{"slept": d.String()}
}

// inodeFill creates empty files in DIR until an error, MAX files or
// DURATION (checklist #20-21).
func inodeFill(args []string) any {
	if len(args) != 3 {
		return map[string]string{"error": "usage: inodes DIR MAX DURATION"}
	}
	max, _ := strconv.Atoi(args[1])
	dur, _ := time.ParseDuration(args[2])
	n, stop := 0, "max"
	deadline := time.Now().Add(dur)
	for n < max {
		if n%1000 == 0 {
			if time.Now().After(deadline) {
				stop = "time"
				break
			}
			if err := os.MkdirAll(filepath.Join(args[0], strconv.Itoa(n/1000)), 0o755); err != nil {
				stop = errStr(err)
				break
			}
		}
		fd, err := unix.Open(filepath.Join(args[0], strconv.Itoa(n/1000), strconv.Itoa(n)), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			stop = errStr(err)
			break
		}
		unix.Close(fd)
		n++
	}
	return map[string]any{"files": n, "stop": stop}
}

// unixScan lists the unix sockets the sandbox can see (filesystem and
// abstract, from /proc/net/unix of its own network namespace) and tries to
// connect to each, and to well-known host sockets by path (checklist #26).
func unixScan() map[string]any {
	res := map[string]string{}
	b, _ := os.ReadFile("/proc/net/unix")
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 8 {
			res[f[7]] = ""
		}
	}
	for _, p := range []string{"/run/docker.sock", "/var/run/docker.sock", "/run/containerd/containerd.sock",
		"/run/berth/berth.sock", "/run/systemd/private", "/run/dbus/system_bus_socket"} {
		res[p] = ""
	}
	names := make([]string, 0, len(res))
	for n := range res {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		addr := n
		if strings.HasPrefix(n, "@") {
			addr = "\x00" + n[1:]
		}
		c, err := net.DialTimeout("unix", addr, time.Second)
		if err == nil {
			c.Close()
		}
		res[n] = errStr(err)
	}
	return map[string]any{"sockets": res}
}
