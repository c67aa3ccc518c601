package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// posture reports the process's privileges and namespaces (checklist #13).
func posture() map[string]any {
	out := map[string]any{}
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "CapEff", "CapBnd", "CapPrm", "CapInh", "CapAmb", "NoNewPrivs", "Seccomp", "Uid", "Gid":
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	ns := map[string]string{}
	for _, n := range []string{"pid", "mnt", "uts", "ipc", "net", "cgroup", "user", "time"} {
		ns[n], _ = os.Readlink("/proc/self/ns/" + n)
	}
	out["ns"] = ns
	for _, m := range []string{"uid_map", "gid_map"} {
		b, err := os.ReadFile("/proc/self/" + m)
		if err != nil {
			out[m] = errStr(err)
		} else {
			out[m] = strings.Join(strings.Fields(string(b)), " ")
		}
	}
	// Mounts: mount point, fs type, source and the root of the mount
	// inside its filesystem (a bind mount of a host path shows it there).
	var mounts []map[string]string
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 6 || len(g) < 2 {
			continue
		}
		mounts = append(mounts, map[string]string{"root": f[3], "target": f[4], "opts": f[5], "fstype": g[0], "source": g[1]})
	}
	out["mounts"] = mounts
	return out
}

// kernelPaths tries host-wide kernel knobs and secrets (checklist #16). Write
// probes only open for writing and never write a byte.
func kernelPaths() map[string]string {
	out := map[string]string{}
	for _, p := range []string{"/proc/kcore", "/proc/timer_list", "/proc/keys", "/proc/sched_debug", "/proc/kallsyms"} {
		f, err := os.Open(p)
		if err != nil {
			out["read "+p] = errStr(err)
			continue
		}
		n, err := f.Read(make([]byte, 64))
		f.Close()
		if n > 0 && p == "/proc/kallsyms" {
			// kallsyms is world-readable, but the addresses are zero
			// without CAP_SYSLOG: report whether they are.
			b, _ := os.ReadFile(p)
			if strings.HasPrefix(string(b), "0000000000000000") {
				n = 0
			}
		}
		out["read "+p] = fmt.Sprintf("%d bytes %s", n, errStr(err))
	}
	for _, p := range []string{"/proc/sysrq-trigger", "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe",
		"/proc/sys/vm/drop_caches", "/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/enabled",
		"/sys/power/state", "/proc/sys/kernel/hostname"} {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		out["write "+p] = errStr(err)
	}
	for _, p := range []string{"/dev/kmsg", "/dev/mem", "/dev/kmem", "/dev/port", "/sys/firmware/efi"} {
		_, err := os.Stat(p)
		out["stat "+p] = errStr(err)
	}
	return out
}

// cgroupEscape attempts the CVE-2022-0492 steps and raising the sandbox's
// own limits (checklist #15). Files are only opened for writing.
func cgroupEscape() map[string]string {
	out := map[string]string{}
	tryWrite := func(key, p string) {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		out[key] = errStr(err)
	}
	// Whatever the hierarchy (v1 or v2), the files in the visible tree.
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && strings.Count(p, "/") > 5 {
			return filepath.SkipDir
		}
		switch d.Name() {
		case "release_agent", "notify_on_release", "memory.max", "memory.limit_in_bytes", "pids.max", "cgroup.procs", "devices.allow":
			tryWrite("write "+p, p)
		}
		return nil
	})
	out["mkdir /sys/fs/cgroup/pids/escape"] = errStr(os.Mkdir("/sys/fs/cgroup/pids/escape", 0o755))
	os.Remove("/sys/fs/cgroup/pids/escape")
	// Under cgroup v1 /sys/fs/cgroup is the sandbox's own tmpfs, where a
	// directory is just a directory; only under v2 is it a cgroup.
	var sfs unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &sfs) == nil && sfs.Type == unix.CGROUP2_SUPER_MAGIC {
		out["mkdir /sys/fs/cgroup/escape"] = errStr(os.Mkdir("/sys/fs/cgroup/escape", 0o755))
		os.Remove("/sys/fs/cgroup/escape")
	}
	// Mount a fresh cgroup hierarchy (the CVE's route to release_agent).
	dir := "/tmp/probe-cg"
	os.MkdirAll(dir, 0o755)
	for _, m := range []struct{ key, fstype, data string }{
		{"mount cgroup v1 memory", "cgroup", "memory"}, {"mount cgroup v1 rdma", "cgroup", "rdma"}, {"mount cgroup2", "cgroup2", ""},
	} {
		err := unix.Mount("cgroup", dir, m.fstype, 0, m.data)
		out[m.key] = errStr(err)
		if err == nil {
			tryWrite(m.key+" release_agent", filepath.Join(dir, "release_agent"))
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	}
	return out
}

// devices tries to create and open device nodes (checklist #17). args
// may add "name=major:minor" character or block devices ("b:" prefix).
func devices() map[string]string {
	out := map[string]string{}
	type dev struct {
		name  string
		mode  uint32
		major uint32
		minor uint32
	}
	devs := []dev{{"mem", unix.S_IFCHR, 1, 1}, {"kmsg", unix.S_IFCHR, 1, 11}, {"sda", unix.S_IFBLK, 8, 0}, {"vda", unix.S_IFBLK, 253, 0}}
	for _, a := range os.Args[2:] {
		// "name=b:MAJ:MIN" or "name=c:MAJ:MIN"
		n, spec, _ := strings.Cut(a, "=")
		f := strings.Split(spec, ":")
		if len(f) != 3 {
			continue
		}
		maj, _ := strconv.Atoi(f[1])
		min, _ := strconv.Atoi(f[2])
		mode := uint32(unix.S_IFCHR)
		if f[0] == "b" {
			mode = unix.S_IFBLK
		}
		devs = append(devs, dev{n, mode, uint32(maj), uint32(min)})
	}
	dir := "/tmp/probe-dev"
	os.MkdirAll(dir, 0o755)
	for _, d := range devs {
		p := filepath.Join(dir, d.name)
		os.Remove(p)
		err := unix.Mknod(p, d.mode|0o600, int(unix.Mkdev(d.major, d.minor)))
		out["mknod "+d.name] = errStr(err)
		if err == nil {
			f, err := os.Open(p)
			if err == nil {
				f.Close()
			}
			out["open "+d.name] = errStr(err)
			os.Remove(p)
		}
	}
	// The allowlisted ones still work.
	for _, p := range []string{"/dev/null", "/dev/zero", "/dev/urandom", "/dev/tty", "/dev/ptmx"} {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err == nil {
			f.Close()
		}
		out["open "+p] = errStr(err)
	}
	return out
}

// setuidTest: "prepare DIR" (as root) plants a setuid-root copy of the probe
// and tries to give a second copy file capabilities; "run DIR" (as a user)
// runs the setuid copy's whoami (checklist #17).
func setuidTest(args []string) any {
	if len(args) != 2 {
		return map[string]string{"error": "usage: setuid prepare|run DIR"}
	}
	suid, fcap := filepath.Join(args[1], "suid-probe"), filepath.Join(args[1], "fcap-probe")
	if args[0] == "run" {
		out, err := exec.Command(suid, "whoami").Output()
		if err != nil {
			return map[string]string{"error": errStr(err)}
		}
		me := whoami()
		return map[string]string{"whoami": strings.TrimSpace(string(out)), "caller NoNewPrivs": me["NoNewPrivs"]}
	}
	out := map[string]string{}
	self, err := os.ReadFile("/proc/self/exe")
	if err == nil {
		err = os.WriteFile(suid, self, 0o755)
	}
	if err == nil {
		err = os.Chown(suid, 0, 0)
	}
	if err == nil {
		err = unix.Chmod(suid, 0o4755) // os.Chmod would drop the setuid bit
	}
	out["plant setuid"] = errStr(err)
	var st unix.Stat_t
	if unix.Stat(suid, &st) == nil {
		out["mode"] = fmt.Sprintf("%o uid %d", st.Mode, st.Uid)
	}
	var sfs unix.Statfs_t
	if unix.Statfs(suid, &sfs) == nil {
		out["nosuid mount"] = fmt.Sprint(sfs.Flags&unix.ST_NOSUID != 0)
	}
	os.WriteFile(fcap, self, 0o755)
	// vfs_cap_data v2: magic 0x02000000 | effective, permitted = CAP_SYS_ADMIN.
	capData := []byte{0x01, 0x00, 0x00, 0x02, 0x00, 0x00, 0x20, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	out["setxattr security.capability"] = errStr(unix.Setxattr(fcap, "security.capability", capData, 0))
	return out
}

func whoami() map[string]string {
	status, _ := os.ReadFile("/proc/self/status")
	out := map[string]string{"uid": strconv.Itoa(os.Getuid()), "euid": strconv.Itoa(os.Geteuid())}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "CapEff" || k == "NoNewPrivs") {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}
