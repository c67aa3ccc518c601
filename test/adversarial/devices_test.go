//go:build adversarial

package adversarial

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/weaken"
	"golang.org/x/sys/unix"
)

// hostRootDev names the host's root block device for the probe, so the
// device test tries the disk that matters.
func hostRootDev() string {
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		return ""
	}
	return fmt.Sprintf("hostroot=b:%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
}

// TestDevices: no device nodes can be made (no CAP_MKNOD), and a node that
// exists anyway cannot be opened (device cgroup allowlist); the allowlisted
// devices work (checklist #17). Negative controls: with capabilities and
// the user namespace off mknod works but the device cgroup still refuses
// the host's disk; with the device allowlist off too, the disk opens.
func TestDevices(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "adv-dev"})
	for _, user := range []string{"root", "user"} {
		var v map[string]string
		probe(t, "adv-dev", user, &v, "devices", hostRootDev())
		for k, r := range v {
			if strings.HasPrefix(k, "open /dev/") {
				if r != "OK" && !(k == "open /dev/tty" && r == "ENXIO") {
					t.Errorf("as %s: allowlisted %s: %s", user, k, r)
				}
				continue
			}
			if r == "OK" {
				t.Errorf("as %s: %s succeeded", user, k)
			}
		}
		t.Logf("as %s: %v", user, v)
	}
	// mknod of a device needs CAP_MKNOD in the host's user namespace, so
	// the user namespace is a second wall: the negative controls lift it
	// together with the capability drop.
	t.Run("negative/"+weaken.Caps+","+weaken.UserNS, func(t *testing.T) {
		withWeakened(t, weaken.Caps+","+weaken.UserNS, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-dev-weak"})
			var v map[string]string
			probe(t, "adv-dev-weak", "root", &v, "devices", hostRootDev())
			if v["mknod hostroot"] != "OK" {
				t.Fatalf("with all capabilities mknod still failed: %v", v)
			}
			if v["open hostroot"] == "OK" {
				t.Errorf("the device cgroup did not stop the open with capabilities off: %v", v)
			}
		})
	})
	t.Run("negative/"+weaken.Caps+","+weaken.UserNS+","+weaken.Devices, func(t *testing.T) {
		withWeakened(t, weaken.Caps+","+weaken.UserNS+","+weaken.Devices, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-dev-weak"})
			var v map[string]string
			probe(t, "adv-dev-weak", "root", &v, "devices", hostRootDev())
			// Some device the allowlist refuses (the host's disk, kmsg)
			// now opens.
			opened := []string{}
			for _, n := range []string{"hostroot", "vda", "sda", "kmsg", "mem"} {
				if v["open "+n] == "OK" {
					opened = append(opened, n)
				}
			}
			if len(opened) == 0 {
				t.Fatalf("with the device allowlist off no device node opened: %v", v)
			}
			t.Logf("detected: opened %v", opened)
		})
	})
}

// TestSetuid: a setuid-root binary planted by root in the sandbox gives the
// default user nothing (no-new-privileges), and file capabilities cannot be
// set (no CAP_SETFCAP) (checklist #17). Negative control: no-new-privs off,
// the same binary runs with euid 0.
func TestSetuid(t *testing.T) {
	check := func(t *testing.T, name string) map[string]string {
		var prep map[string]string
		probe(t, name, "root", &prep, "setuid", "prepare", "/home/user")
		if prep["plant setuid"] != "OK" {
			t.Fatalf("could not plant the setuid binary: %v", prep)
		}
		var who map[string]string
		probe(t, name, "user", &who, "setuid", "run", "/home/user")
		var out map[string]string
		if err := jsonUnmarshal(who["whoami"], &out); err != nil {
			t.Fatalf("setuid run: %v %v", who, err)
		}
		out["setxattr"] = prep["setxattr security.capability"]
		t.Logf("planted %s (nosuid mount %s); caller NoNewPrivs %s", prep["mode"], prep["nosuid mount"], who["caller NoNewPrivs"])
		return out
	}
	sandbox(t, api.CreateSandboxRequest{Name: "adv-suid"})
	w := check(t, "adv-suid")
	if w["euid"] != "1000" || w["uid"] != "1000" {
		t.Errorf("setuid binary raised the user: %v", w)
	}
	if w["setxattr"] == "OK" {
		t.Errorf("file capabilities could be set")
	}
	t.Logf("%v", w)
	t.Run("negative/"+weaken.NoNewPrivs, func(t *testing.T) {
		withWeakened(t, weaken.NoNewPrivs, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-suid-weak"})
			w := check(t, "adv-suid-weak")
			if w["euid"] != "0" {
				t.Fatalf("with no-new-privs off the setuid binary did not raise: %v", w)
			}
		})
	})
}

// TestExecAsUserHasNoCaps: exec as the default user holds no capabilities.
func TestExecAsUserHasNoCaps(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "adv-user"})
	var w map[string]string
	probe(t, "adv-user", "user", &w, "whoami")
	if w["euid"] != "1000" || w["CapEff"] != "0000000000000000" {
		t.Fatalf("default user: %v", w)
	}
	res, err := d.c.Exec(context.Background(), "adv-user", api.ExecRequest{Argv: []string{"id", "-u"}})
	if err != nil || strings.TrimSpace(res.Stdout) != "1000" {
		t.Fatalf("default exec user: %+v %v", res, err)
	}
}
