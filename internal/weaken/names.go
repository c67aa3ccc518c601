package weaken

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
	AgentLogCap    = "agent-log-cap"   // the agent's host-side log is not capped, sudo lines not truncated

	// Egress proxy (package egress).
	EgressBlocklist = "egress-blocklist"  // the proxy and resolver reach always-blocked addresses
	EgressPolicy    = "egress-policy"     // allow/deny/internet are not enforced (all allowed)
	EgressPin       = "egress-pin"        // the proxy connects to the address the sandbox dialled
	EgressHostMatch = "egress-host-match" // intercepted HTTPS is routed by Host, not SNI

	// E2B-compatible API (package e2b).
	E2BAccessToken = "e2b-access-token" // the E2B data plane does not check X-Access-Token

	// Cluster ownership (node/local owner.go).
	Fencing = "fencing" // a node acts on every record, owned or not, and Fence stops nothing

	// Cluster placement (daemon/cluster.go newPlacer). Not a protection
	// but a property the locality test must be able to tell apart.
	Locality = "locality" // the placer's image and snapshot-chain weights are zero

	// The daemon's HTTP listener (package server, Guard and LimitListener).
	HTTPGuard = "http-guard" // no body-read bounds, no close after an unread body, no connection caps
)
