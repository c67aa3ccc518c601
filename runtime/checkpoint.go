package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// DefaultCRIUDir is where scripts/criu.sh installs berth's criu wrapper.
const DefaultCRIUDir = "/usr/local/lib/berth/criu/bin"

// CheckpointOptions tune one checkpoint.
type CheckpointOptions struct {
	LeaveRunning bool // keep the container running after the dump
}

// RestoreOptions tune one restore.
type RestoreOptions struct {
	// Digest is the checkpoint's digest as berth recorded it at checkpoint
	// time (never read from the checkpoint dir itself).
	Digest string
	// SkipPosture is for the posture check's own negative control only.
	skipPosture bool
}

// Options CRIU gets through its config file (runc's RPC has no field for
// them). Dump: lock the network with nftables (the library is in berth's
// CRIU tree; there is no iptables-restore on the host) and close
// established TCP connections instead of dumping them. Restore: the same
// TCP rule.
const (
	criuDumpConf    = "network-lock nftables\ntcp-close\n"
	criuRestoreConf = "tcp-close\n"
)

// Timings of the last Checkpoint or Restore step, for benchmarks.
type CheckpointTimings struct {
	CRIU, Pack, Verify, Unpack, Posture time.Duration
}

func (r *OCI) criuCommand(ctx context.Context, conf string, args ...string) (*exec.Cmd, error) {
	dir := r.CRIU
	if dir == "" {
		dir = DefaultCRIUDir
	}
	if _, err := os.Stat(filepath.Join(dir, "criu")); err != nil {
		return nil, errdefs.FailedPrecondition("checkpoint: no criu in %s (scripts/criu.sh installs it): %v", dir, err)
	}
	cmd := r.command(ctx, args...)
	env := []string{"CRIU_CONFIG_FILE=" + conf, "PATH=" + dir + ":/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PATH=") && !strings.HasPrefix(e, "CRIU_CONFIG_FILE=") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	return cmd, nil
}

// criuVersion asks berth's criu for its version.
func (r *OCI) criuVersion(ctx context.Context) string {
	dir := r.CRIU
	if dir == "" {
		dir = DefaultCRIUDir
	}
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "criu"), "--version").Output()
	if err != nil {
		return ""
	}
	v, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(strings.TrimPrefix(v, "Version:"))
}

// Checkpoint dumps container id with CRIU (`runc checkpoint`) and stores
// the image in dir as one tar named by its sha256, with the host's CPU
// model and flags, the criu version and the kernel inside. Without
// LeaveRunning the container is gone afterwards (runc deletes it).
func (r *OCI) Checkpoint(ctx context.Context, id, dir string, opts CheckpointOptions) (*Checkpoint, CheckpointTimings, error) {
	var tm CheckpointTimings
	if err := validID(id); err != nil {
		return nil, tm, err
	}
	if len(r.StartVia) > 0 {
		return nil, tm, errdefs.FailedPrecondition("checkpoint %s: gVisor sandboxes are not checkpointed (runsc checkpoint is not supported by berth yet)", id)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, tm, err
	}
	work, err := os.MkdirTemp(dir, ".dump-"+id+"-")
	if err != nil {
		return nil, tm, err
	}
	defer os.RemoveAll(work)
	image := filepath.Join(work, "image")
	if err := os.Mkdir(image, 0o700); err != nil {
		return nil, tm, err
	}
	conf := filepath.Join(work, "criu.conf")
	if err := os.WriteFile(conf, []byte(criuDumpConf), 0o600); err != nil {
		return nil, tm, err
	}
	args := []string{"checkpoint", "--image-path", image, "--work-path", work, "--manage-cgroups-mode", "soft"}
	if opts.LeaveRunning {
		args = append(args, "--leave-running")
	}
	cmd, err := r.criuCommand(ctx, conf, append(args, id)...)
	if err != nil {
		return nil, tm, err
	}
	t0 := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, tm, criuFailure("checkpoint", id, err, out, filepath.Join(work, "dump.log"))
	}
	tm.CRIU = time.Since(t0)
	m := CheckpointMeta{ID: id, CRIUVersion: r.criuVersion(ctx), Kernel: kernelRelease(), ImageBytes: dirBytes(image)}
	if m.CPUModel, m.CPUFlags, err = hostCPU(); err != nil {
		return nil, tm, err
	}
	if err := writeMeta(image, m); err != nil {
		return nil, tm, err
	}
	t0 = time.Now()
	digest, size, err := pack(image, dir)
	if err != nil {
		return nil, tm, fmt.Errorf("checkpoint %s: pack: %w", id, err)
	}
	tm.Pack = time.Since(t0)
	return &Checkpoint{Digest: digest, PackBytes: size, Meta: m}, tm, nil
}

// Restore brings container id back from the checkpoint opts.Digest in dir
// (`runc restore --detach` with bundle's config: its netns path, mounts and
// cgroup). In order, and failing closed at each step: the pack's sha256
// must equal the recorded digest (before anything parses it), the host
// must have every CPU flag the checkpointed host had, CRIU restores, and
// VerifyPosture must pass on the restored init (else the container is
// killed and deleted).
func (r *OCI) Restore(ctx context.Context, id, bundle, dir string, opts RestoreOptions) (CheckpointTimings, error) {
	var tm CheckpointTimings
	if err := validID(id); err != nil {
		return tm, err
	}
	if len(r.StartVia) > 0 {
		return tm, errdefs.FailedPrecondition("restore %s: gVisor sandboxes are not checkpointed", id)
	}
	t0 := time.Now()
	p, err := verifyPack(dir, opts.Digest)
	if err != nil {
		return tm, err
	}
	tm.Verify = time.Since(t0)
	work, err := os.MkdirTemp(dir, ".restore-"+id+"-")
	if err != nil {
		return tm, err
	}
	defer os.RemoveAll(work)
	image := filepath.Join(work, "image")
	if err := os.Mkdir(image, 0o700); err != nil {
		return tm, err
	}
	t0 = time.Now()
	if err := unpack(p, image); err != nil {
		return tm, err
	}
	tm.Unpack = time.Since(t0)
	m, err := readMeta(image)
	if err != nil {
		return tm, err
	}
	_, flags, err := hostCPU()
	if err != nil {
		return tm, err
	}
	if err := cpuCompatible(m, flags); err != nil {
		return tm, err
	}
	conf := filepath.Join(work, "criu.conf")
	if err := os.WriteFile(conf, []byte(criuRestoreConf), 0o600); err != nil {
		return tm, err
	}
	bundle, err = filepath.Abs(bundle)
	if err != nil {
		return tm, err
	}
	out, err := os.OpenFile(filepath.Join(bundle, AgentLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return tm, err
	}
	defer out.Close()
	cmd, err := r.criuCommand(ctx, conf, "restore", "--detach", "--image-path", image, "--work-path", work,
		"--manage-cgroups-mode", "soft", "--bundle", bundle, "--pid-file", filepath.Join(bundle, PidFile), id)
	if err != nil {
		return tm, err
	}
	// Files, as at create: the restored processes keep what they had, and
	// runc's own stdio must not be a pipe the container holds open.
	cmd.Stdout, cmd.Stderr = out, out
	logStart := fileSize(out.Name())
	t0 = time.Now()
	if err := cmd.Run(); err != nil {
		_ = r.Delete(context.WithoutCancel(ctx), id, true)
		return tm, criuFailure("restore", id, err, []byte(readTail(out.Name(), logStart)), filepath.Join(work, "restore.log"))
	}
	tm.CRIU = time.Since(t0)
	if opts.skipPosture {
		return tm, nil
	}
	t0 = time.Now()
	st, err := r.State(ctx, id)
	if err == nil {
		err = VerifyPosture(st.Pid, bundle)
	}
	tm.Posture = time.Since(t0)
	if err != nil {
		_ = r.Delete(context.WithoutCancel(ctx), id, true)
		return tm, errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "restore %s: posture check after restore failed, container removed: %v", id, err)
	}
	return tm, nil
}

// criuFailure turns a failed runc checkpoint/restore into an error with
// CRIU's own error lines, which say what it refused.
func criuFailure(verb, id string, err error, out []byte, log string) error {
	var lines []string
	if b, rerr := os.ReadFile(log); rerr == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "Error") && !strings.Contains(l, "RLIMIT_NOFILE") {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
	}
	if len(lines) > 6 {
		lines = lines[:6]
	}
	msg := strings.Join(lines, "; ")
	if msg == "" {
		msg = strings.TrimSpace(string(out))
		if len(msg) > maxErrTail {
			msg = msg[len(msg)-maxErrTail:]
		}
	}
	return errdefs.FailedPrecondition("%s %s: criu refused (%v): %s", verb, id, err, msg)
}

func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// Checkpoint dumps id with its runtime; gVisor ids get failed_precondition.
func (s *Selector) Checkpoint(ctx context.Context, id, dir string, opts CheckpointOptions) (*Checkpoint, CheckpointTimings, error) {
	if s.IsGVisor(id) {
		return nil, CheckpointTimings{}, errdefs.FailedPrecondition("checkpoint %s: gVisor sandboxes are not checkpointed; they sleep by stop", id)
	}
	return s.Default.Checkpoint(ctx, id, dir, opts)
}

// Restore restores id with its runtime; gVisor ids get failed_precondition.
func (s *Selector) Restore(ctx context.Context, id, bundle, dir string, opts RestoreOptions) (CheckpointTimings, error) {
	if s.IsGVisor(id) {
		return CheckpointTimings{}, errdefs.FailedPrecondition("restore %s: gVisor sandboxes are not checkpointed", id)
	}
	return s.Default.Restore(ctx, id, bundle, dir, opts)
}
