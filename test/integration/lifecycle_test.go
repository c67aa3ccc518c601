//go:build integration

package integration

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func ptr[T any](v T) *T { return &v }

func TestCreateByNameThenExec(t *testing.T) {
	sb := sandbox(t, api.CreateSandboxRequest{Name: "it-basic"})
	if sb.State != api.StateRunning || !strings.HasPrefix(sb.ImageDigest, "sha256:") {
		t.Fatalf("sandbox not running from a pinned digest: %+v", sb)
	}
	// The isolation the suite runs under (BERTH_IT_ISOLATION) is real.
	wantIso := os.Getenv("BERTH_IT_ISOLATION")
	if wantIso == "" {
		wantIso = api.IsolationRunc
	}
	if sb.Isolation != wantIso {
		t.Fatalf("isolation %q, want %q", sb.Isolation, wantIso)
	}
	if k := run(t, "it-basic", "dmesg 2>/dev/null | head -1; true"); strings.Contains(k.Stdout, "gVisor") != (wantIso == api.IsolationGVisor) {
		t.Fatalf("isolation %s, but the kernel says %q", wantIso, k.Stdout)
	}
	res := run(t, "it-basic", "node -v")
	if res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "v") {
		t.Fatalf("node -v: %+v", res)
	}
	res = run(t, "it-basic", "echo out; echo err >&2; exit 3")
	if res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Fatalf("exit code and streams: %+v", res)
	}
	res = run(t, "it-basic", "id -un; pwd")
	if res.Stdout != "user\n/home/user\n" {
		t.Fatalf("default user and cwd: %q", res.Stdout)
	}
	// sudo works for user (the image's NOPASSWD rule) while no_new_privs
	// stays on: berth's sudo raises nothing through exec.
	res = run(t, "it-basic", "sudo id -u; sudo -u user id -un; echo hi | sudo cat; sudo sh -c 'exit 7'; echo rc=$?")
	if res.Stdout != "0\nuser\nhi\nrc=7\n" {
		t.Fatalf("sudo as user: %+v", res)
	}
	if wantIso == api.IsolationRunc {
		if r := run(t, "it-basic", "sudo grep NoNewPrivs /proc/self/status"); !strings.Contains(r.Stdout, "1") {
			t.Fatalf("sudo'd process without no_new_privs: %+v", r)
		}
	}
	// Negative control: an account without a NOPASSWD rule is refused.
	if r, err := d.c.Exec(context.Background(), "it-basic", api.ExecRequest{Command: "sudo id -u", User: "nobody"}); err != nil || r.ExitCode == 0 || !strings.Contains(r.Stderr, "not allowed") {
		t.Fatalf("sudo as nobody: %+v %v", r, err)
	}
	// Root on request.
	if r, err := d.c.Exec(context.Background(), "it-basic", api.ExecRequest{Command: "id -u", User: "root"}); err != nil || r.Stdout != "0\n" {
		t.Fatalf("exec as root: %+v %v", r, err)
	}
	// A get by name returns the same sandbox, not a new one.
	again, created, err := d.c.GetOrCreate(context.Background(), api.CreateSandboxRequest{Name: "it-basic"})
	if err != nil || created || again.ID != sb.ID {
		t.Fatalf("get-or-create of a running sandbox: created=%v id=%s want %s err=%v", created, again.ID, sb.ID, err)
	}
	// Streaming exec delivers output before the command ends.
	pr, pw := io.Pipe()
	first := make(chan time.Time, 1)
	go func() {
		buf := make([]byte, 64)
		n, _ := pr.Read(buf)
		if n > 0 {
			first <- time.Now()
		}
		io.Copy(io.Discard, pr)
	}()
	t0 := time.Now()
	st, err := d.c.ExecStream(context.Background(), "it-basic", api.ExecRequest{Command: "echo early; sleep 1.5; echo late"}, pw, io.Discard)
	pw.Close()
	end := time.Now()
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("stream: %+v %v", st, err)
	}
	select {
	case at := <-first:
		if end.Sub(at) < time.Second {
			t.Fatalf("first output arrived %s after start, only %s before the end: not streamed", at.Sub(t0), end.Sub(at))
		}
	default:
		t.Fatal("no streamed output")
	}
	// Timeouts kill the command and report it.
	res, err = d.c.Exec(context.Background(), "it-basic", api.ExecRequest{Command: "sleep 30", TimeoutMs: 300})
	if err != nil || !res.TimedOut {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	// Unknown sandboxes are a clear 404, and exec never creates one.
	if _, err := d.c.Exec(context.Background(), "it-nope", api.ExecRequest{Command: "true"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("exec on a missing sandbox: want not found, got %v", err)
	}
}

// randReader yields deterministic pseudo-random bytes.
type randReader struct{ r *rand.Rand }

func (r randReader) Read(p []byte) (int, error) { return r.r.Read(p) }

func TestFileRoundTrip100MB(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "it-files"})
	ctx := context.Background()
	const size = 100 << 20
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(randReader{rand.New(rand.NewSource(7))}, size), h)
	t0 := time.Now()
	if err := d.c.WriteFile(ctx, "it-files", "big/blob.bin", src, 0o644); err != nil {
		t.Fatal(err)
	}
	up := time.Since(t0)
	want := fmt.Sprintf("%x", h.Sum(nil))
	rc, err := d.c.ReadFile(ctx, "it-files", "/home/user/big/blob.bin")
	if err != nil {
		t.Fatal(err)
	}
	h2 := sha256.New()
	t0 = time.Now()
	n, err := io.Copy(h2, rc)
	rc.Close()
	down := time.Since(t0)
	if err != nil || n != size {
		t.Fatalf("download: n=%d err=%v", n, err)
	}
	if got := fmt.Sprintf("%x", h2.Sum(nil)); got != want {
		t.Fatalf("checksum mismatch: %s != %s", got, want)
	}
	inside := run(t, "it-files", "sha256sum /home/user/big/blob.bin | cut -d' ' -f1")
	if strings.TrimSpace(inside.Stdout) != want {
		t.Fatalf("checksum inside the sandbox: %q want %s", inside.Stdout, want)
	}
	t.Logf("100 MiB upload %s (%.0f MiB/s), download %s (%.0f MiB/s)", up.Round(time.Millisecond),
		100/up.Seconds(), down.Round(time.Millisecond), 100/down.Seconds())
	// The other file operations.
	if err := d.c.Mkdir(ctx, "it-files", api.MkdirRequest{Path: "a/b/c"}); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Rename(ctx, "it-files", api.RenameRequest{From: "big/blob.bin", To: "a/b/c/moved.bin"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := d.c.Exists(ctx, "it-files", "big/blob.bin"); err != nil || ok {
		t.Fatalf("exists after rename: %v %v", ok, err)
	}
	fi, err := d.c.Stat(ctx, "it-files", "a/b/c/moved.bin")
	if err != nil || fi.Size != size || fi.Type != "file" {
		t.Fatalf("stat: %+v %v", fi, err)
	}
	list, err := d.c.ListFiles(ctx, "it-files", "a", true)
	if err != nil || len(list) != 3 {
		t.Fatalf("recursive list of a: %+v %v", list, err)
	}
	if err := d.c.Remove(ctx, "it-files", "a", true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Stat(ctx, "it-files", "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("stat after remove: want not found, got %v", err)
	}
}

func TestSleepAndWakeKeepFiles(t *testing.T) {
	ctx := context.Background()
	sb := sandbox(t, api.CreateSandboxRequest{Name: "it-sleep"})
	if err := d.c.WriteFile(ctx, "it-sleep", "notes.txt", strings.NewReader("remember me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := d.c.Exec(ctx, "it-sleep", api.ExecRequest{Command: "mkdir -p /opt/work && echo built > /opt/work/artifact", User: "root"}); err != nil || r.ExitCode != 0 {
		t.Fatalf("write outside home as root: %+v %v", r, err)
	}
	if err := d.c.Sleep(ctx, "it-sleep"); err != nil {
		t.Fatal(err)
	}
	got, err := d.c.Get(ctx, "it-sleep")
	if err != nil || got.State != api.StateSleeping {
		t.Fatalf("after sleep: %+v %v", got, err)
	}
	for _, c := range takeCensus(t).Containers {
		if c == sb.ID {
			t.Fatalf("container %s still exists while sleeping", c)
		}
	}
	// The next request wakes it with every file intact.
	t0 := time.Now()
	res := run(t, "it-sleep", "cat /home/user/notes.txt /opt/work/artifact")
	t.Logf("wake to first exec: %s", time.Since(t0).Round(time.Millisecond))
	if res.Stdout != "remember mebuilt\n" {
		t.Fatalf("files after wake: %q", res.Stdout)
	}
	if got, _ := d.c.Get(ctx, "it-sleep"); got.State != api.StateRunning || got.ID != sb.ID {
		t.Fatalf("after wake: %+v", got)
	}
}

func TestSleepAfterAlarm(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-idle", SleepAfter: "2s"})
	keep := sandbox(t, api.CreateSandboxRequest{Name: "it-keep", SleepAfter: "2s", KeepAlive: ptr(true)})
	// A running exec keeps the sandbox awake past its sleepAfter.
	res := run(t, "it-idle", "sleep 3; echo done")
	if res.Stdout != "done\n" {
		t.Fatalf("long exec: %+v", res)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		sb, err := d.c.Get(ctx, "it-idle")
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == api.StateSleeping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle sandbox did not sleep: %+v", sb)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if sb, _ := d.c.Get(ctx, "it-keep"); sb.State != api.StateRunning || sb.ID != keep.ID {
		t.Fatalf("keepAlive sandbox went to sleep: %+v", sb)
	}
}

func TestConcurrentGetOrCreate(t *testing.T) {
	ctx := context.Background()
	const n = 20
	var wg sync.WaitGroup
	ids := make([]string, n)
	created := make([]bool, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sb, c, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-race"})
			ids[i], created[i], errs[i] = sb.ID, c, err
		}(i)
	}
	wg.Wait()
	t.Cleanup(func() { _ = d.c.Destroy(context.Background(), "it-race") })
	nCreated := 0
	for i := 0; i < n; i++ {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("call %d got sandbox %s, call 0 got %s", i, ids[i], ids[0])
		}
		if created[i] {
			nCreated++
		}
	}
	if nCreated != 1 {
		t.Fatalf("%d calls report creating the sandbox, want exactly 1", nCreated)
	}
	count := 0
	for _, c := range takeCensus(t).Containers {
		if c == ids[0] {
			count++
		}
	}
	if count != 1 {
		t.Fatalf("%d containers for sandbox %s, want 1", count, ids[0])
	}
}

func TestKill9RestartLeavesNoOrphans(t *testing.T) {
	ctx := context.Background()
	before := takeCensus(t)
	live := sandbox(t, api.CreateSandboxRequest{Name: "it-survivor"})
	run(t, "it-survivor", "echo precious > /home/user/precious.txt")
	sandbox(t, api.CreateSandboxRequest{Name: "it-asleep"})
	if err := d.c.Sleep(ctx, "it-asleep"); err != nil {
		t.Fatal(err)
	}
	withSurvivor := takeCensus(t)

	// Crash the daemon in the middle of starting a sandbox at each
	// lifecycle step, then restart it cleanly: reconcile must remove
	// whatever the half-finished start left.
	for _, step := range []string{"start.rootfs-mounted", "start.network-ready", "start.container-created"} {
		d.kill9()
		var err error
		d, err = startDaemon([]string{"BERTH_FAILPOINTS=" + step + "=exit"})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-crash"})
		if err == nil {
			t.Fatalf("failpoint %s did not fire", step)
		}
		_ = d.cmd.Wait()
		d, err = startDaemon(nil)
		if err != nil {
			t.Fatal(err)
		}
		after := takeCensus(t)
		if !reflect.DeepEqual(after, withSurvivor) {
			t.Fatalf("after crash at %s and restart, host resources differ:\nwant %+v\ngot  %+v", step, withSurvivor, after)
		}
		sb, err := d.c.Get(ctx, "it-crash")
		if err != nil || sb.State == api.StateRunning || sb.State == api.StateStarting {
			t.Fatalf("crashed sandbox state after reconcile: %+v %v", sb, err)
		}
	}
	// The running sandbox was adopted, not restarted, and kept its files.
	sb, err := d.c.Get(ctx, "it-survivor")
	if err != nil || sb.State != api.StateRunning || sb.StartedAt == nil || !sb.StartedAt.Equal(*live.StartedAt) {
		t.Fatalf("survivor not adopted: %+v (started %v) %v", sb, live.StartedAt, err)
	}
	if res := run(t, "it-survivor", "cat /home/user/precious.txt"); res.Stdout != "precious\n" {
		t.Fatalf("survivor lost its file: %q", res.Stdout)
	}
	// The crashed sandbox works on the next request.
	if res := run(t, "it-crash", "echo alive"); res.Stdout != "alive\n" {
		t.Fatalf("crashed sandbox after restart: %+v", res)
	}
	if err := d.c.Destroy(ctx, "it-crash"); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Destroy(ctx, "it-survivor"); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Destroy(ctx, "it-asleep"); err != nil {
		t.Fatal(err)
	}
	if after := takeCensus(t); !reflect.DeepEqual(after, before) {
		t.Fatalf("after destroying everything, resources differ from the start:\nwant %+v\ngot  %+v", before, after)
	}
}

// TestFailedCreateFreesTheName (issue 12 D): a create with a missing
// image answers not found and leaves no record, so a retried create and a
// get-or-create with a valid image both succeed.
func TestFailedCreateFreesTheName(t *testing.T) {
	ctx := context.Background()
	const name = "it-failed-create"
	_ = d.c.Destroy(ctx, name)
	t.Cleanup(func() { _ = d.c.Destroy(context.Background(), name) })
	if _, err := d.c.Create(ctx, api.CreateSandboxRequest{Name: name, Image: "no-such-image-it"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("create with a missing image: %v", err)
	}
	if sb, err := d.c.Get(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the failed create left a record: %+v %v", sb, err)
	}
	if _, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: name, Image: "no-such-image-it"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get-or-create with a missing image: %v", err)
	}
	sb, created, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: name})
	if err != nil || !created || sb.State != api.StateRunning {
		t.Fatalf("get-or-create with a valid image after the failures: %+v created=%v %v", sb, created, err)
	}
	if _, err := d.c.Create(ctx, api.CreateSandboxRequest{Name: name}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("strict create of a live name: %v", err)
	}
}

// TestEverydayCommands: what every shell script does works in a sandbox,
// as root and as the default user. rmdir failed with "Function not
// implemented" (rmdir(2) was missing from the seccomp allowlist; the unit
// test runtime.TestSeccompAllowsEverydayCalls checks the profile).
func TestEverydayCommands(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "it-everyday"})
	script := `set -e; d=$(mktemp -d); mkdir -p "$d/a/b"; rmdir "$d/a/b"; rmdir "$d/a"; ` +
		`touch "$d/f"; ln -s f "$d/l"; mv "$d/f" "$d/g"; chmod 600 "$d/g"; rm "$d/l" "$d/g"; rmdir "$d"; ` +
		`test ! -e "$d"; echo done`
	for _, user := range []string{"user", "root"} {
		res, err := d.c.Exec(context.Background(), "it-everyday", api.ExecRequest{Command: script, User: user, TimeoutMs: 60000})
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "done" {
			t.Fatalf("as %s: %+v %v", user, res, err)
		}
	}
}
