//go:build adversarial

package adversarial

import (
	"os"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/weaken"
)

// blockedEPERM are the calls the seccomp profile refuses with EPERM
// whatever the sandbox's user or namespaces (checklist #14).
var blockedEPERM = []string{
	"keyctl", "add_key", "bpf", "perf_event_open", "io_uring_setup", "userfaultfd",
	"init_module", "finit_module", "delete_module", "kexec_load", "open_by_handle_at",
	"socket_alg", "socket_alg_highbits", "socket_vsock", "reboot",
}

// syscallProblems judges the probe's syscall table.
func syscallProblems(s map[string]string, inUserNS bool) []string {
	var bad []string
	for _, k := range blockedEPERM {
		if s[k] != "EPERM" {
			bad = append(bad, k+"="+s[k])
		}
	}
	if s["clone3"] != "ENOSYS" {
		bad = append(bad, "clone3="+s["clone3"])
	}
	if !strings.HasPrefix(s["int80"], "killed") {
		bad = append(bad, "int80="+s["int80"])
	}
	// Namespaces and mounts: refused outright without a user namespace.
	// Inside one they may be allowed (they act on the sandbox's own
	// namespaces only), but a mount still must not succeed.
	for _, k := range []string{"clone_newuser", "unshare_newuser", "unshare_newns", "setns", "mount"} {
		if s[k] == "OK" && (!inUserNS || k == "mount" || k == "setns") {
			bad = append(bad, k+"="+s[k])
		}
	}
	return bad
}

// TestBlockedSyscalls runs the blocked-syscall table as root and as the
// default user; the sandbox keeps running afterwards (checklist #14).
// Negative control: with seccomp off the table shows the calls go through.
func TestBlockedSyscalls(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "adv-sys"})
	var p postureVerdict
	probe(t, "adv-sys", "root", &p, "posture")
	userns := !rootMapped(p.UIDMap)
	for _, user := range []string{"root", "user"} {
		var s map[string]string
		probe(t, "adv-sys", user, &s, "syscalls")
		if s["socket_inet"] != "OK" || s["socket_unix"] != "OK" || s["after"] != "alive" {
			t.Errorf("as %s: ordinary calls broken: %v", user, s)
		}
		if bad := syscallProblems(s, userns); len(bad) > 0 {
			t.Errorf("as %s: not blocked: %v", user, bad)
		}
		t.Logf("as %s: %v", user, s)
	}
	if r := run(t, "adv-sys", "echo alive"); r.Stdout != "alive\n" {
		t.Fatalf("sandbox after the syscall table: %+v", r)
	}
	t.Run("negative/"+weaken.Seccomp, func(t *testing.T) {
		withWeakened(t, weaken.Seccomp, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-sys-weak"})
			var s map[string]string
			probe(t, "adv-sys-weak", "root", &s, "syscalls")
			bad := syscallProblems(s, false)
			joined := strings.Join(bad, " ")
			// Without the filter the capability-free calls go through
			// and the i386 ABI runs.
			for _, want := range []string{"int80=", "clone3=", "add_key="} {
				if !strings.Contains(joined, want) {
					t.Errorf("with seccomp off the probe did not see %s open (table %v)", want, s)
				}
			}
			t.Logf("detected: %v", bad)
		})
	})
}

// TestRawSockets: no CAP_NET_RAW, so no raw or packet sockets for
// spoofing or sniffing (checklist #25). Negative control: caps and the
// user namespace off (the sandbox's network namespace belongs to the host's
// user namespace, so CAP_NET_RAW inside a user namespace is a second wall).
func TestRawSockets(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "adv-raw"})
	for _, user := range []string{"root", "user"} {
		var r map[string]string
		probe(t, "adv-raw", user, &r, "rawsock")
		for k, v := range r {
			if v == "OK" {
				t.Errorf("as %s: %s socket opened", user, k)
			}
		}
	}
	t.Run("negative/"+weaken.Caps+","+weaken.UserNS, func(t *testing.T) {
		withWeakened(t, weaken.Caps+","+weaken.UserNS, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-raw-weak"})
			var r map[string]string
			probe(t, "adv-raw-weak", "root", &r, "rawsock")
			if r["raw_icmp"] != "OK" {
				t.Fatalf("with all capabilities a raw socket still failed: %v", r)
			}
		})
	})
}

// cgroupProblems lists the cgroup files the probe could open for writing
// and the cgroup mounts it made (checklist #15).
func cgroupProblems(c map[string]string) []string {
	var bad []string
	for k, v := range c {
		if v == "OK" {
			bad = append(bad, k)
		}
	}
	return bad
}

// TestCgroupEscape tries CVE-2022-0492 (release_agent through a fresh
// cgroup mount) and raising the sandbox's own limits, then checks the
// limits from the host (checklist #15). Mounting needs both CAP_SYS_ADMIN
// and the mount syscall, two independent walls, so the negative control
// lifts both: then the probe mounts a cgroup hierarchy (and, where a v1
// controller is unused on the host, reaches its release_agent).
func TestCgroupEscape(t *testing.T) {
	sb := sandbox(t, api.CreateSandboxRequest{Name: "adv-cg"})
	for _, user := range []string{"root", "user"} {
		var c map[string]string
		probe(t, "adv-cg", user, &c, "cgroup")
		if bad := cgroupProblems(c); len(bad) > 0 {
			t.Errorf("as %s: %v", user, bad)
		}
		if user == "root" {
			t.Logf("%v", c)
		}
	}
	// From the host: the limits are still the instance's.
	read := 0
	for _, base := range cgroupDirs(sb.ID) {
		for _, f := range []string{"memory.limit_in_bytes", "pids.max", "memory.max"} {
			if b, err := os.ReadFile(base + "/" + f); err == nil {
				read++
				if v := strings.TrimSpace(string(b)); v == "max" || v == "9223372036854771712" {
					t.Errorf("%s/%s is unlimited after the attack", base, f)
				}
			}
		}
	}
	if read == 0 {
		t.Errorf("found no cgroup limit of %s on the host (%v)", sb.ID, cgroupDirs(sb.ID))
	}
	t.Run("negative/"+weaken.Caps+","+weaken.Seccomp, func(t *testing.T) {
		withWeakened(t, weaken.Caps+","+weaken.Seccomp, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-cg-weak"})
			var c map[string]string
			probe(t, "adv-cg-weak", "root", &c, "cgroup")
			bad := cgroupProblems(c)
			if !strings.Contains(strings.Join(bad, " "), "mount cgroup") {
				t.Fatalf("with caps and seccomp off the probe could not mount a cgroup hierarchy: %v", c)
			}
			t.Logf("detected: %v", bad)
		})
	})
}

// cgroupDirs finds the sandbox's cgroup directories on the host (v1
// controllers or the v2 tree), by the container id in the path.
func cgroupDirs(id string) []string {
	var dirs []string
	for _, ctrl := range []string{"memory", "pids", ""} {
		root := "/sys/fs/cgroup/" + ctrl
		ents, _ := os.ReadDir(root + "/" + strings.TrimPrefix(advRunDir, "/run/"))
		for _, e := range ents {
			if e.IsDir() && strings.Contains(e.Name(), id) {
				dirs = append(dirs, root+"/"+strings.TrimPrefix(advRunDir, "/run/")+"/"+e.Name())
			}
		}
	}
	return dirs
}
