package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/weaken"
)

// OCI drives an OCI runtime binary through the runc command-line contract.
// runc, crun and runsc (gVisor) accept the same commands used here.
type OCI struct {
	Binary string // path or name of the runtime binary
	Root   string // --root: the runtime's state dir, e.g. /run/berth/runc
	// LogDir, if set, receives <id>.runc.log instead of <bundle>/runc.log.
	LogDir string
	// Flags are global flags put before every command (runsc's platform,
	// network and file options).
	Flags []string
	// StartVia, if set, is a command line that runs the start command
	// (the runtime binary and its arguments are appended); see GVisorStartVia.
	StartVia []string
	// CRIU, if set, is a directory holding berth's `criu` (scripts/criu.sh:
	// /usr/local/lib/berth/criu/bin); runc finds criu on PATH.
	CRIU string
}

// State is the runtime's view of one container.
type State struct {
	ID      string    `json:"id"`
	Status  string    `json:"status"` // created, running, stopped, paused
	Pid     int       `json:"pid"`
	Bundle  string    `json:"bundle"`
	Created time.Time `json:"created"`
}

// Files in a bundle dir written by Create.
const (
	RuntimeLog = "runc.log"  // the runtime's own log (JSON lines)
	AgentLog   = "agent.log" // the container's stdout and stderr
	PidFile    = "init.pid"
)

// maxErrTail bounds how much runtime output goes into an error message.
const maxErrTail = 1024

// New returns a driver for binary with state under root.
func New(binary, root string) *OCI { return &OCI{Binary: binary, Root: root} }

func (r *OCI) command(ctx context.Context, args ...string) *exec.Cmd {
	all := append([]string{"--root", r.Root}, r.Flags...)
	return exec.CommandContext(ctx, r.Binary, append(all, args...)...)
}

// run executes a runtime command whose stdio is not inherited by a container,
// so its stderr can be captured through a pipe.
func (r *OCI) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := r.command(ctx, args...)
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: maxErrTail}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", r.Binary, args[0], ctx.Err())
		}
		return nil, classify(fmt.Sprintf("%s %s: %v: %s", filepath.Base(r.Binary), strings.Join(args, " "), err, msg))
	}
	return stdout.Bytes(), nil
}

// classify maps runtime error text to an errdefs kind.
func classify(msg string) error {
	l := strings.ToLower(msg)
	switch {
	case strings.Contains(l, "does not exist") || strings.Contains(l, "not found"):
		return errdefs.NotFound("%s", msg)
	case strings.Contains(l, "already exists") || strings.Contains(l, "container with id exists"):
		return errdefs.AlreadyExists("%s", msg)
	case strings.Contains(l, "not running") || strings.Contains(l, "not paused") ||
		strings.Contains(l, "not stopped") || strings.Contains(l, "cannot start"):
		return errdefs.FailedPrecondition("%s", msg)
	}
	return errdefs.Internal("%s", msg)
}

// agentLogRotateAt: at a create (a start or a wake), an agent.log larger
// than this becomes agent.log.1 (replacing the one before) and the new run
// starts a fresh file. Within a run the agent caps the file itself
// (agent.LogMax), since the container holds it open.
const agentLogRotateAt = 1 << 20

func rotateAgentLog(path string) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Size() > agentLogRotateAt {
		_ = os.Rename(path, path+".1")
	}
}

// Create sets up container id from bundle (runtime create): namespaces,
// cgroups and mounts exist and the init process waits for Start. The
// container's stdout and stderr go to bundle/agent.log and stdin is
// /dev/null; no other daemon fd reaches it (Go opens files O_CLOEXEC and runc
// closes every fd above 2 before exec, checklist #12).
func (r *OCI) Create(ctx context.Context, id, bundle string) error {
	return r.createOrRun(ctx, "create", id, bundle)
}

// Run creates container id from bundle as Create does and starts its
// process, in one runtime command (`runc run --detach`): one process
// spawn and one read of the container's state less than Create + Start.
// A runtime started through StartVia (runsc) takes Create + Start.
func (r *OCI) Run(ctx context.Context, id, bundle string) error {
	if len(r.StartVia) > 0 {
		if err := r.Create(ctx, id, bundle); err != nil {
			return err
		}
		return r.Start(ctx, id)
	}
	return r.createOrRun(ctx, "run", id, bundle)
}

// createOrRun runs `runtime create` or `runtime run --detach` for id.
func (r *OCI) createOrRun(ctx context.Context, verb, id, bundle string) error {
	if err := validID(id); err != nil {
		return err
	}
	bundle, err := filepath.Abs(bundle)
	if err != nil {
		return err
	}
	logPath := filepath.Join(bundle, RuntimeLog)
	if r.LogDir != "" {
		logPath = filepath.Join(r.LogDir, id+".runc.log")
	}
	rotateAgentLog(filepath.Join(bundle, AgentLog))
	out, err := os.OpenFile(filepath.Join(bundle, AgentLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", id, err)
	}
	defer out.Close()
	logStart := fileSize(logPath)
	outStart := fileSize(out.Name())

	args := []string{"--log", logPath, "--log-format", "json", verb}
	if verb == "run" {
		args = append(args, "--detach")
	}
	args = append(args, "--bundle", bundle, "--pid-file", filepath.Join(bundle, PidFile))
	var leak *os.File
	if weaken.Off(weaken.FDAllowlist) {
		// Negative control for the fd allowlist: hand the container a
		// host directory fd, as the CVE-2024-21626 leak did. The agent,
		// told not to check (--no-fd-check), passes it on to every command.
		if leak, err = os.Open(bundle); err != nil {
			return err
		}
		defer leak.Close()
		args = append(args, "--preserve-fds", "1")
	}
	cmd := r.command(ctx, append(args, id)...)
	if leak != nil {
		cmd.ExtraFiles = []*os.File{leak}
	}
	// Files, not pipes: the container inherits these fds, and a pipe would
	// keep cmd.Wait blocked for the container's whole life.
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s %s: %w", verb, id, ctx.Err())
		}
		msg := runtimeLogErrors(logPath, logStart)
		if msg == "" {
			msg = readTail(out.Name(), outStart)
		}
		return classify(fmt.Sprintf("%s %s %s: %v: %s", filepath.Base(r.Binary), verb, id, err, msg))
	}
	return nil
}

// Start runs the created container's process.
func (r *OCI) Start(ctx context.Context, id string) error {
	if len(r.StartVia) > 0 {
		via := &OCI{Binary: r.StartVia[0], Root: r.Root, Flags: r.Flags}
		prefix := append(append([]string(nil), r.StartVia[1:]...), r.Binary, "--root", r.Root)
		cmd := exec.CommandContext(ctx, via.Binary, append(append(prefix, r.Flags...), "start", id)...)
		var stderr tailBuffer
		stderr.max = maxErrTail
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return classify(fmt.Sprintf("%s start %s: %v: %s", filepath.Base(r.Binary), id, err, strings.TrimSpace(stderr.String())))
		}
		return nil
	}
	_, err := r.run(ctx, "start", id)
	return err
}

// Kill sends sig to the container's init. Signalling a stopped container is
// a no-op success (the goal, "not running", already holds); an unknown one
// is NotFound.
func (r *OCI) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	_, err := r.run(ctx, "kill", id, strconv.Itoa(int(sig)))
	if errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		return nil
	}
	return err
}

// Delete removes the container's runtime state and cgroup. With force, a
// running container is killed first. Deleting an unknown id is not an error.
func (r *OCI) Delete(ctx context.Context, id string, force bool) error {
	args := []string{"delete"}
	if force {
		args = append(args, "--force")
	}
	_, err := r.run(ctx, append(args, id)...)
	if errdefs.IsKind(err, errdefs.ErrNotFound) {
		return nil
	}
	return err
}

// State returns the container's state; an unknown id is errdefs.NotFound.
func (r *OCI) State(ctx context.Context, id string) (State, error) {
	out, err := r.run(ctx, "state", id)
	if err != nil {
		return State{}, err
	}
	var s State
	if err := json.Unmarshal(out, &s); err != nil {
		return State{}, fmt.Errorf("parse state of %s: %w", id, err)
	}
	return s, nil
}

// List returns every container under Root.
func (r *OCI) List(ctx context.Context) ([]State, error) {
	if _, err := os.Stat(r.Root); errors.Is(err, os.ErrNotExist) {
		return nil, nil // nothing was ever created
	}
	out, err := r.run(ctx, "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	var ss []State
	if err := json.Unmarshal(bytes.TrimSpace(out), &ss); err != nil {
		return nil, fmt.Errorf("parse container list: %w", err)
	}
	return ss, nil
}

// Pause freezes every process of the container (freezer cgroup).
func (r *OCI) Pause(ctx context.Context, id string) error {
	_, err := r.run(ctx, "pause", id)
	return err
}

// Resume thaws a paused container.
func (r *OCI) Resume(ctx context.Context, id string) error {
	_, err := r.run(ctx, "resume", id)
	return err
}

// Update changes a running container's limits (instance resize). Zero
// fields are left unchanged.
func (r *OCI) Update(ctx context.Context, id string, l Limits) error {
	args := []string{"update"}
	if l.MemoryBytes > 0 {
		m := strconv.FormatInt(l.MemoryBytes, 10)
		args = append(args, "--memory", m, "--memory-swap", m)
	}
	if l.MilliCPU > 0 {
		args = append(args, "--cpu-period", strconv.Itoa(cpuPeriod),
			"--cpu-quota", strconv.FormatInt(l.MilliCPU*cpuPeriod/1000, 10))
	}
	if l.Pids > 0 {
		args = append(args, "--pids-limit", strconv.FormatInt(l.Pids, 10))
	}
	if len(args) == 1 {
		return nil
	}
	_, err := r.run(ctx, append(args, id)...)
	return err
}

// runtimeLogErrors returns the warning/error messages runc logged after
// offset, bounded to maxErrTail bytes.
func runtimeLogErrors(path string, offset int64) string {
	raw := readTail(path, offset)
	var msgs []string
	for _, line := range strings.Split(raw, "\n") {
		var e struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg != "" {
			if e.Level == "error" || e.Level == "fatal" || e.Level == "warning" {
				msgs = append(msgs, e.Msg)
			}
		}
	}
	s := strings.Join(msgs, "; ")
	if len(s) > maxErrTail {
		s = "..." + s[len(s)-maxErrTail:]
	}
	return s
}

// readTail reads at most maxErrTail*4 bytes of path from offset on, keeping
// the end.
func readTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	size := fileSize(path)
	if size-offset > maxErrTail*4 {
		offset = size - maxErrTail*4
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, maxErrTail*4))
	return strings.TrimSpace(string(b))
}

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// validID keeps ids usable as runtime ids and path elements.
func validID(id string) error {
	if id == "" || len(id) > 128 || id == "." || id == ".." {
		return errdefs.InvalidArgument("invalid container id %q", id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return errdefs.InvalidArgument("invalid container id %q", id)
		}
	}
	return nil
}
