package weaken

import (
	"os"
	"sort"
	"strings"
	"sync"
)

// EnvVar names the environment variable the switches are read from.
const EnvVar = "BERTH_TEST_WEAKEN"

// Names of the protections a test can switch off. Packages add theirs here
// so the whole set is visible in one place.
const (
	Seccomp        = "seccomp"         // no seccomp filter
	NoNewPrivs     = "no-new-privs"    // noNewPrivileges false
	Caps           = "caps"            // the full capability set
	MaskedPaths    = "masked-paths"    // no masked or read-only kernel paths
	UserNS         = "userns"          // no user namespace: sandbox root is host root
	Devices        = "devices"         // no device cgroup allowlist
	FDAllowlist    = "fd-allowlist"    // the agent does not close unexpected fds
	Egress         = "egress"          // no egress filtering to private ranges / host
	SandboxIsolate = "sandbox-isolate" // sandbox-to-sandbox traffic allowed
	FilesConfine   = "files-confine"   // the files API does not pin paths to the root
	PIDLimit       = "pid-limit"       // no pids limit
	MemoryLimit    = "memory-limit"    // no memory limit
	DiskQuota      = "disk-quota"      // no quota on the writable layer

	// Egress proxy (package egress).
	EgressBlocklist = "egress-blocklist"  // the proxy and resolver reach always-blocked addresses
	EgressPolicy    = "egress-policy"     // allow/deny/internet are not enforced (all allowed)
	EgressPin       = "egress-pin"        // the proxy connects to the address the sandbox dialled
	EgressHostMatch = "egress-host-match" // intercepted HTTPS is routed by Host, not SNI

	// E2B-compatible API (package e2b).
	E2BAccessToken = "e2b-access-token" // the E2B data plane does not check X-Access-Token
)

var (
	once sync.Once
	set  map[string]bool
)

func load() {
	set = map[string]bool{}
	for _, n := range strings.Split(os.Getenv(EnvVar), ",") {
		if n = strings.TrimSpace(n); n != "" {
			set[n] = true
		}
	}
}

// Off reports whether the protection name is switched off for this process.
func Off(name string) bool {
	once.Do(load)
	return set[name]
}

// Active lists the switches that are set, sorted, for the start-up warning.
func Active() []string {
	once.Do(load)
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
