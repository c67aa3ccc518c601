package server

import (
	"regexp"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Limits on request shapes. They are generous for real use and exist so that
// one request cannot make the daemon allocate or store without bound
// (adversarial checklist #28).
const (
	maxPathBytes   = 4096 // PATH_MAX
	maxEnv         = 1024
	maxEnvKey      = 256
	maxEnvValue    = 128 << 10
	maxLabels      = api.MaxLabels
	maxRefBytes    = 512
	maxArgv        = 4096
	maxUserBytes   = 64
	maxTimeoutMs   = int64(7 * 24 * time.Hour / time.Millisecond)
	maxSleepAfter  = 30 * 24 * time.Hour
	maxVCPU        = 1024
	maxMemoryMiB   = 1 << 24 // 16 TiB
	maxDiskMB      = 1 << 30 // 1 EB
	maxInstanceLen = 64
)

var (
	envKeyRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	instanceRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
)

// ValidateSandboxName reports whether name is a valid sandbox name:
// 1–63 characters of [a-z0-9-], not starting with '-'. Names become parts of
// host paths, cgroup names and netns names, so the server checks them itself
// rather than trusting every layer below to: "../x", "a/b", NUL or newlines
// can never reach the backend.
func ValidateSandboxName(name string) error { return api.ValidateSandboxName(name) }

func validateCreate(req *api.CreateSandboxRequest) error {
	if err := ValidateSandboxName(req.Name); err != nil {
		return err
	}
	if req.Image != "" {
		if err := validateRef("image", req.Image); err != nil {
			return err
		}
	}
	if req.Instance != "" && (len(req.Instance) > maxInstanceLen || !instanceRE.MatchString(req.Instance)) {
		return errdefs.InvalidArgument("invalid instance %q: use a name such as lite, basic or standard-1", req.Instance)
	}
	if r := req.Resources; r != nil {
		switch {
		case r.VCPU < 0 || r.VCPU > maxVCPU:
			return errdefs.InvalidArgument("resources.vcpu must be between 0 and %d, got %v", maxVCPU, r.VCPU)
		case r.MemoryMiB < 0 || r.MemoryMiB > maxMemoryMiB:
			return errdefs.InvalidArgument("resources.memoryMib must be between 0 and %d, got %d", maxMemoryMiB, r.MemoryMiB)
		case r.DiskMB < 0 || r.DiskMB > maxDiskMB:
			return errdefs.InvalidArgument("resources.diskMb must be between 0 and %d, got %d", maxDiskMB, r.DiskMB)
		}
	}
	if err := validateEnv("env", req.Env); err != nil {
		return err
	}
	if err := validateLabels(req.Labels); err != nil {
		return err
	}
	if req.SleepAfter != "" {
		d, err := time.ParseDuration(req.SleepAfter)
		if err != nil || d < time.Second || d > maxSleepAfter {
			return errdefs.InvalidArgument("invalid sleepAfter %q: want a duration between 1s and 720h such as \"10m\"", req.SleepAfter)
		}
	}
	if err := validateStart(req.Start); err != nil {
		return err
	}
	return validateCreateSnapshot(req)
}

func validateExec(req *api.ExecRequest) error {
	switch {
	case len(req.Argv) > 0 && req.Command != "":
		return errdefs.InvalidArgument("set either argv or command, not both")
	case len(req.Argv) == 0 && req.Command == "":
		return errdefs.InvalidArgument("exec needs argv (a list) or command (a shell string)")
	case len(req.Argv) > maxArgv:
		return errdefs.InvalidArgument("argv has %d elements, max %d", len(req.Argv), maxArgv)
	case len(req.Argv) > 0 && req.Argv[0] == "":
		return errdefs.InvalidArgument("argv[0] is empty")
	}
	for i, a := range req.Argv {
		if hasNUL(a) {
			return errdefs.InvalidArgument("argv[%d] contains a NUL byte", i)
		}
	}
	if hasNUL(req.Command) {
		return errdefs.InvalidArgument("command contains a NUL byte")
	}
	if req.Cwd != "" {
		if err := validatePath("cwd", req.Cwd); err != nil {
			return err
		}
	}
	if err := validateEnv("env", req.Env); err != nil {
		return err
	}
	if len(req.User) > maxUserBytes || hasControl(req.User) {
		return errdefs.InvalidArgument("invalid user %q", req.User)
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > maxTimeoutMs {
		return errdefs.InvalidArgument("timeoutMs must be between 0 (none) and %d, got %d", maxTimeoutMs, req.TimeoutMs)
	}
	return nil
}

// validatePath checks the shape of a path inside a sandbox. Where it points
// is not checked here: the agent resolves it inside the sandbox's own mount
// namespace, where a symlink cannot reach the host (CVE-2018-15664). Here we
// only refuse what no file system call can carry: NUL (which would truncate
// the path in C), over-long paths and bytes that are not UTF-8 (JSON cannot
// round-trip them).
func validatePath(field, p string) error {
	switch {
	case p == "":
		return errdefs.InvalidArgument("%s is empty", field)
	case len(p) > maxPathBytes:
		return errdefs.InvalidArgument("%s is %d bytes long, max %d", field, len(p), maxPathBytes)
	case hasNUL(p):
		return errdefs.InvalidArgument("%s contains a NUL byte", field)
	case !utf8.ValidString(p):
		return errdefs.InvalidArgument("%s is not valid UTF-8", field)
	}
	return nil
}

// validateRef checks the shape of an image name, reference or digest.
func validateRef(field, ref string) error {
	if ref == "" {
		return errdefs.InvalidArgument("%s is empty", field)
	}
	if len(ref) > maxRefBytes {
		return errdefs.InvalidArgument("%s is %d bytes long, max %d", field, len(ref), maxRefBytes)
	}
	for _, r := range ref {
		if r == utf8.RuneError || unicode.IsSpace(r) || unicode.IsControl(r) || r > unicode.MaxASCII {
			return errdefs.InvalidArgument("invalid %s %q: image references are printable ASCII without spaces", field, ref)
		}
	}
	return nil
}

func validateEnv(field string, env map[string]string) error {
	if len(env) > maxEnv {
		return errdefs.InvalidArgument("%s has %d variables, max %d", field, len(env), maxEnv)
	}
	for k, v := range env {
		if len(k) > maxEnvKey || !envKeyRE.MatchString(k) {
			return errdefs.InvalidArgument("%s: invalid variable name %q (want [A-Za-z_][A-Za-z0-9_]*)", field, k)
		}
		if v == api.EnvUnset {
			continue // null: unset the variable
		}
		if len(v) > maxEnvValue {
			return errdefs.InvalidArgument("%s: value of %s is %d bytes, max %d", field, k, len(v), maxEnvValue)
		}
		if hasNUL(v) {
			return errdefs.InvalidArgument("%s: value of %s contains a NUL byte", field, k)
		}
	}
	return nil
}

// validateLabels is api.ValidateLabels: sandbox and node labels share the
// rule.
func validateLabels(labels map[string]string) error { return api.ValidateLabels(labels) }

func validState(st string) bool {
	switch st {
	case api.StateStarting, api.StateRunning, api.StateSleeping, api.StateDestroyed, api.StateFailed:
		return true
	}
	return false
}

func hasNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

func errInvalidMode(m uint32) error {
	return errdefs.InvalidArgument("mode %#o is not a permission mode (max 07777)", m)
}

// pullRefRE is the grammar of an image reference (the distribution
// project's): an optional registry host[:port], slash-separated path
// components of lowercase alphanumerics joined by '.', '_', '__' or '-',
// an optional tag and an optional digest. A pull of anything else, such as
// "../../etc/passwd", is refused here as invalid rather than being sent to
// a "registry" named "..", which fails as unavailable.
var pullRefRE = regexp.MustCompile(`^` +
	`(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/|\[[0-9a-fA-F:.]+\](?::[0-9]+)?/)?` +
	`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` +
	`(?::[\w][\w.-]{0,127})?` +
	`(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`)

func validatePullRef(ref string) error {
	if err := validateRef("ref", ref); err != nil {
		return err
	}
	if !pullRefRE.MatchString(ref) {
		return errdefs.InvalidArgument("invalid image reference %q: want [registry[:port]/]path[:tag][@digest] with lowercase path components such as docker.io/library/node:22", ref)
	}
	return nil
}
