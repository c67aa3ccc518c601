package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-sh/berth/internal/errdefs"
)

// VerifyPosture checks that the container process pid runs with what the
// spec in bundle asked for: no_new_privs, a seccomp filter, exactly the
// bounding and effective capability sets, and the user namespace mapping.
// A runtime that silently skipped one of them (an old runc, a runtime built
// without seccomp, a kernel without user namespaces) fails the start here:
// a sandbox never runs weaker than its spec without saying so. Call it once
// the container's process runs its own binary (the agent answered).
func VerifyPosture(pid int, bundle string) error {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return err
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("parse %s: %w", bundle, err)
	}
	st, err := procStatus(pid)
	if err != nil {
		return err
	}
	var bad []string
	check := func(what, got, want string) {
		if got != want {
			bad = append(bad, fmt.Sprintf("%s is %q, want %q", what, got, want))
		}
	}
	if s.Process != nil {
		if s.Process.NoNewPrivileges {
			check("NoNewPrivs", st["NoNewPrivs"], "1")
		}
		if c := s.Process.Capabilities; c != nil {
			check("CapBnd", st["CapBnd"], capsHex(c.Bounding))
			if s.Process.User.UID == 0 {
				check("CapEff", st["CapEff"], capsHex(c.Effective))
			}
		}
	}
	if s.Linux != nil && s.Linux.Seccomp != nil {
		check("Seccomp", st["Seccomp"], "2")
	}
	if s.Linux != nil && len(s.Linux.UIDMappings) > 0 {
		m := s.Linux.UIDMappings[0]
		got, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
		check("uid_map", strings.Join(strings.Fields(string(got)), " "), fmt.Sprintf("%d %d %d", m.ContainerID, m.HostID, m.Size))
	}
	if len(bad) > 0 {
		return errdefs.FailedPrecondition("sandbox posture does not match its spec (the runtime or kernel did not apply a protection): %s", strings.Join(bad, "; "))
	}
	return nil
}

func procStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out, nil
}

// capsHex renders capability names as /proc/<pid>/status shows them.
func capsHex(names []string) string {
	var m uint64
	for _, n := range names {
		for bit, c := range allCapabilities {
			if c == n {
				m |= 1 << bit
			}
		}
	}
	return fmt.Sprintf("%016x", m)
}
