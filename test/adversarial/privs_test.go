//go:build adversarial

package adversarial

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/weaken"
)

type postureVerdict struct {
	CapEff, CapBnd, CapPrm, CapInh, CapAmb string
	NoNewPrivs, Seccomp                    string
	NS                                     map[string]string   `json:"ns"`
	UIDMap                                 string              `json:"uid_map"`
	GIDMap                                 string              `json:"gid_map"`
	Mounts                                 []map[string]string `json:"mounts"`
}

// Capabilities a sandbox must never hold: each is a known route to the host
// kernel or to other tenants.
var forbiddenCaps = map[int]string{
	2: "DAC_READ_SEARCH", 9: "LINUX_IMMUTABLE", 12: "NET_ADMIN", 13: "NET_RAW", 14: "IPC_LOCK",
	16: "SYS_MODULE", 17: "SYS_RAWIO", 19: "SYS_PTRACE", 20: "SYS_PACCT", 21: "SYS_ADMIN",
	22: "SYS_BOOT", 24: "SYS_RESOURCE", 25: "SYS_TIME", 26: "SYS_TTY_CONFIG", 27: "MKNOD",
	30: "AUDIT_CONTROL", 31: "SETFCAP", 32: "MAC_OVERRIDE", 33: "MAC_ADMIN", 34: "SYSLOG",
	35: "WAKE_ALARM", 36: "BLOCK_SUSPEND", 38: "PERFMON", 39: "BPF", 40: "CHECKPOINT_RESTORE",
}

func heldForbidden(mask string) []string {
	v, err := strconv.ParseUint(mask, 16, 64)
	if err != nil {
		return []string{"unparsable " + mask}
	}
	var held []string
	for bit, name := range forbiddenCaps {
		if v&(1<<bit) != 0 {
			held = append(held, name)
		}
	}
	return held
}

// rootMapped reports whether uid 0 inside maps to uid 0 on the host.
func rootMapped(uidMap string) bool {
	f := strings.Fields(uidMap)
	return len(f) < 3 || (f[0] == "0" && f[1] == "0")
}

// postureProblems lists every way p falls short of the posture invariant
// (checklist #13). The same function judges the negative controls.
func postureProblems(p postureVerdict) []string {
	var bad []string
	for _, m := range []string{p.CapEff, p.CapBnd, p.CapPrm} {
		if h := heldForbidden(m); len(h) > 0 {
			bad = append(bad, "capabilities held: "+strings.Join(h, ","))
			break
		}
	}
	if p.CapAmb != "0000000000000000" {
		bad = append(bad, "ambient capabilities "+p.CapAmb)
	}
	if p.NoNewPrivs != "1" {
		bad = append(bad, "NoNewPrivs "+p.NoNewPrivs)
	}
	if p.Seccomp != "2" {
		bad = append(bad, "Seccomp mode "+p.Seccomp)
	}
	for _, n := range []string{"pid", "mnt", "uts", "ipc", "net", "cgroup", "user"} {
		host, _ := os.Readlink("/proc/self/ns/" + n)
		if p.NS[n] == "" || p.NS[n] == host {
			bad = append(bad, "host "+n+" namespace")
		}
	}
	if rootMapped(p.UIDMap) {
		bad = append(bad, "uid_map maps root to host root: "+p.UIDMap)
	}
	for _, m := range p.Mounts {
		switch m["fstype"] {
		case "ext4", "xfs", "btrfs", "vfat", "ext3", "ext2":
		default:
			continue
		}
		t := m["target"]
		// Allowed: berth's own read-only binds (the agent, also as
		// /usr/bin/sudo, its socket dir) and the network files.
		if m["root"] == "/" || !(strings.HasPrefix(t, "/.berth/") || t == "/usr/bin/sudo" || t == "/etc/resolv.conf" || t == "/etc/hosts" || t == "/etc/hostname") {
			bad = append(bad, "host filesystem mounted: "+m["source"]+" "+m["root"]+" at "+t)
		}
	}
	return bad
}

// TestPosture checks the sandbox's privileges from inside, for root and
// for the default user (checklist #13). Negative controls: with seccomp,
// no-new-privs, the capability drop or the user namespace off, the same
// check names the hole.
func TestPosture(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "adv-posture"})
	for _, user := range []string{"root", "user"} {
		var p postureVerdict
		probe(t, "adv-posture", user, &p, "posture")
		if bad := postureProblems(p); len(bad) > 0 {
			t.Errorf("posture as %s: %s", user, strings.Join(bad, "; "))
		}
		t.Logf("as %s: CapEff %s NoNewPrivs %s Seccomp %s uid_map %q", user, p.CapEff, p.NoNewPrivs, p.Seccomp, p.UIDMap)
	}
	for _, c := range []struct{ sw, want string }{
		{weaken.Seccomp, "Seccomp mode"},
		{weaken.NoNewPrivs, "NoNewPrivs"},
		{weaken.Caps, "capabilities held"},
		{weaken.UserNS, "uid_map"},
	} {
		t.Run("negative/"+c.sw, func(t *testing.T) {
			withWeakened(t, c.sw, func() {
				sandbox(t, api.CreateSandboxRequest{Name: "adv-posture-weak"})
				var p postureVerdict
				probe(t, "adv-posture-weak", "root", &p, "posture")
				bad := postureProblems(p)
				if !strings.Contains(strings.Join(bad, ";"), c.want) {
					t.Fatalf("with %s off the posture check did not see it (problems: %v)", c.sw, bad)
				}
				t.Logf("detected: %v", bad)
			})
		})
	}
}

// Kernel knobs and secrets are read-only, masked or absent (checklist #16).
func kernelPathProblems(k map[string]string) []string {
	var bad []string
	for key, v := range k {
		switch {
		case strings.HasPrefix(key, "write "):
			if v == "OK" {
				bad = append(bad, key)
			}
		case strings.HasPrefix(key, "read "):
			if !strings.HasPrefix(v, "0 bytes") && !strings.HasPrefix(v, "E") {
				bad = append(bad, key+": "+v)
			}
		case strings.HasPrefix(key, "stat "):
			if v != "ENOENT" {
				bad = append(bad, key+": "+v)
			}
		}
	}
	return bad
}

func TestKernelPaths(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "adv-kpaths"})
	var k map[string]string
	probe(t, "adv-kpaths", "root", &k, "kpaths")
	if bad := kernelPathProblems(k); len(bad) > 0 {
		t.Errorf("kernel paths reachable: %v", bad)
	}
	t.Logf("%v", k)
	t.Run("negative/"+weaken.MaskedPaths, func(t *testing.T) {
		withWeakened(t, weaken.MaskedPaths, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-kpaths-weak"})
			var k map[string]string
			probe(t, "adv-kpaths-weak", "root", &k, "kpaths")
			bad := kernelPathProblems(k)
			if len(bad) == 0 {
				t.Fatalf("with masked paths off the probe saw nothing: %v", k)
			}
			t.Logf("detected: %v", bad)
		})
	})
}
