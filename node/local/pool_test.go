package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store/sqlite"
)

func TestParsePoolSpec(t *testing.T) {
	for _, c := range []struct {
		in   string
		want PoolSpec
		bad  bool
	}{
		{in: "debian-trixie=4", want: PoolSpec{Image: "debian-trixie", Size: 4, Isolation: api.IsolationRunc}},
		{in: "python:3.12=2,instance=basic", want: PoolSpec{Image: "python:3.12", Size: 2, Instance: "basic", Isolation: api.IsolationRunc}},
		{in: "sha256:abc=1,isolation=runc", want: PoolSpec{Image: "sha256:abc", Size: 1, Isolation: api.IsolationRunc}},
		{in: "debian-trixie", bad: true},
		{in: "=3", bad: true},
		{in: "debian-trixie=-1", bad: true},
		{in: "debian-trixie=1001", bad: true},
		{in: "debian-trixie=1,instance=huge", bad: true},
		{in: "debian-trixie=1,instance=custom", bad: true},
		{in: "debian-trixie=1,isolation=gvisor", bad: true},
		{in: "debian-trixie=1,color=red", bad: true},
		{in: "debian-trixie=adaptive,max=100", want: PoolSpec{Image: "debian-trixie", Adaptive: true, Max: 100, Isolation: api.IsolationRunc}},
		{in: "debian-trixie=adaptive,min=2,max=8,instance=basic", want: PoolSpec{Image: "debian-trixie", Adaptive: true, Min: 2, Max: 8, Instance: "basic", Isolation: api.IsolationRunc}},
		{in: "debian-trixie=adaptive", bad: true},             // no max
		{in: "debian-trixie=adaptive,min=9,max=8", bad: true}, // min above max
		{in: "debian-trixie=adaptive,max=1001", bad: true},    // beyond a pool's bound
		{in: "debian-trixie=4,max=8", bad: true},              // max= on a fixed pool
		{in: "debian-trixie=adaptive,max=x", bad: true},
		{in: "debian-trixie=2,snapshot=snap_0a1b", want: PoolSpec{Image: "debian-trixie", Size: 2, Snapshot: "snap_0a1b", Isolation: api.IsolationRunc}},
		{in: "debian-trixie=2,snapshot=../x", bad: true},
		{in: "debian-trixie=2,snapshot=", bad: true},
	} {
		got, err := ParsePoolSpec(c.in)
		if c.bad {
			if !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%q: want invalid argument, got %+v, %v", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// poolRig is a rig whose node keeps the given pools, with its refill loop
// running until the test ends.
func poolRig(t *testing.T, specs ...PoolSpec) *rig {
	t.Helper()
	return poolRigFrom(t, newRig(t), specs...)
}

// waitPool waits until cond holds for the first pool's state.
func waitPool(t *testing.T, m *Manager, what string, cond func(api.Pool) bool) api.Pool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := m.Pools()[0]
		if cond(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never got %s: %+v", what, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// observed is what a test can see of a sandbox from inside and from the
// host.
type observed struct {
	env                  string
	hostname             string
	limits               [3]int64
	etc                  map[string]string
	journal              []string
	view                 api.Sandbox
	userns               uint32 // the range's size
	binds                []Bind
	agentArgs, isolation string
	rootfsIdmapSize      uint32
}

func observe(t *testing.T, r *rig, name string, claimed bool) observed {
	t.Helper()
	sb, err := plane(r.m).Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := plane(r.m).Exec(ctx, name, api.ExecRequest{Command: "env | grep -v -e '^PWD=' -e '^SHLVL=' -e '^_=' | sort"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	r.rt.mu.Lock()
	b := r.rt.written[id]
	o := observed{env: out.String(), hostname: b.Hostname, limits: [3]int64{b.MilliCPU, b.MemoryBytes, b.Pids},
		userns: b.UserNS.Size, isolation: b.Isolation, agentArgs: strings.Join(b.Args, " ")}
	if claimed {
		if r.rt.frozen[id] {
			t.Errorf("claimed %s is still frozen", name)
		}
		o.hostname = r.rt.hostname[id]
		o.limits = r.rt.resized[id]
		o.agentArgs = strings.TrimSuffix(o.agentArgs, " --pool-member")
	}
	r.rt.mu.Unlock()
	for _, bd := range b.Binds {
		bd.Source = strings.ReplaceAll(strings.ReplaceAll(bd.Source, id, "ID"), r.cfg.RunDir, "RUN")
		o.binds = append(o.binds, bd)
	}
	o.etc = map[string]string{}
	for _, f := range []string{"hosts", "hostname", "resolv.conf"} {
		c, err := os.ReadFile(filepath.Join(r.m.sandboxDir(id), "etc", f))
		if err != nil {
			t.Fatal(err)
		}
		o.etc[f] = string(c)
	}
	js, err := r.m.st.Journal(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		o.journal = append(o.journal, j.Op)
	}
	r.rfs.mu.Lock()
	o.rootfsIdmapSize = r.rfs.idmaps[id].Size
	r.rfs.mu.Unlock()
	sb.ID, sb.CreatedAt, sb.StartedAt, sb.LastActive, sb.SleepAt = "", time.Time{}, nil, time.Time{}, nil
	o.view = sb
	return o
}

// TestPoolClaimMatchesCold creates the same sandbox cold on a node
// without a pool and from the warm pool on another, and compares what
// one can see of them: env of a later exec (the request's env, the
// image's, BERTH_SANDBOX), hostname, limits, /etc files, bind mounts,
// user namespace, the public view (labels, instance, resources, state)
// and the journal's operations. The integration suite compares the real
// thing (TestPoolClaimedLikeCold).
func TestPoolClaimMatchesCold(t *testing.T) {
	cold := newRig(t)
	warm := poolRig(t, PoolSpec{Image: "debian-trixie", Size: 2})
	waitPool(t, warm.m, "2 ready", func(p api.Pool) bool { return p.Ready == 2 })
	warm.rt.mu.Lock()
	frozen := len(warm.rt.frozen)
	warm.rt.mu.Unlock()
	if frozen != 2 {
		t.Fatalf("%d members frozen, want 2", frozen)
	}
	req := api.CreateSandboxRequest{Name: "box", Instance: "basic", Env: map[string]string{"SECRET_TOKEN": "s3cret", "PATH": "/opt/bin:/usr/bin:/bin"},
		Labels: map[string]string{"team": "a"}, SleepAfter: "90s"}
	for _, r := range []*rig{cold, warm} {
		if _, _, err := plane(r.m).GetOrCreate(ctx, req, false); err != nil {
			t.Fatal(err)
		}
	}
	p := waitPool(t, warm.m, "a claim and a refill", func(p api.Pool) bool { return p.Claims == 1 && p.Ready == 2 })
	if p.Misses != 0 || p.Refills != 3 {
		t.Fatalf("pool after one claim: %+v", p)
	}
	c, w := observe(t, cold, "box", false), observe(t, warm, "box", true)
	if !strings.Contains(c.env, "SECRET_TOKEN=s3cret\n") || !strings.Contains(c.env, "BERTH_SANDBOX=box\n") || !strings.Contains(c.env, "PATH=/opt/bin:/usr/bin:/bin\n") {
		t.Fatalf("cold env lacks the sandbox's: %s", c.env)
	}
	if c.env != w.env {
		t.Errorf("env differs:\ncold:\n%s\nclaimed:\n%s", c.env, w.env)
	}
	if c.hostname != "box" || w.hostname != "box" {
		t.Errorf("hostname: cold %q, claimed %q", c.hostname, w.hostname)
	}
	if c.limits != w.limits || c.limits[0] != 250 {
		t.Errorf("limits (mCPU, memory, pids): cold %v, claimed %v", c.limits, w.limits)
	}
	for f, v := range c.etc {
		if w.etc[f] != v {
			t.Errorf("/etc/%s: cold %q, claimed %q", f, v, w.etc[f])
		}
	}
	if !slices.Equal(c.journal, w.journal) || !slices.Contains(c.journal, "start") {
		t.Errorf("journal: cold %q, claimed %q", c.journal, w.journal)
	}
	if !slices.Equal(c.binds, w.binds) {
		t.Errorf("binds: cold %+v, claimed %+v", c.binds, w.binds)
	}
	if c.userns != w.userns || c.rootfsIdmapSize != w.rootfsIdmapSize || c.isolation != w.isolation || c.agentArgs != w.agentArgs {
		t.Errorf("userns, idmap, isolation, args: cold %d %d %s %q, claimed %d %d %s %q",
			c.userns, c.rootfsIdmapSize, c.isolation, c.agentArgs, w.userns, w.rootfsIdmapSize, w.isolation, w.agentArgs)
	}
	if c.view.IP != "" && w.view.IP != "" {
		c.view.IP, w.view.IP = "", "" // each node's own address
	}
	if cv, wv := strings.TrimSpace(mustJSON(t, c.view)), strings.TrimSpace(mustJSON(t, w.view)); cv != wv {
		t.Errorf("view:\ncold    %s\nclaimed %s", cv, wv)
	}
	// A second sandbox gets the other member; the first member is never
	// seen again: destroying box removes it for good.
	sb, err := plane(warm.m).Get(ctx, "box")
	if err != nil {
		t.Fatal(err)
	}
	if err := plane(warm.m).Destroy(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	warm.m.pools.mu.Lock()
	for _, pm := range warm.m.pools.list[0].idle {
		if pm.id == sb.ID {
			t.Errorf("destroyed sandbox's member %s is back in the pool", sb.ID)
		}
	}
	warm.m.pools.mu.Unlock()
	// The agent's identity is bound once: a second bind is refused.
	if _, _, err := plane(warm.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "two"}, false); err != nil {
		t.Fatal(err)
	}
	ag, release, err := warm.m.agentOf(ctx, "two")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := ag.BindIdentity(ctx, []string{"PATH=/evil"}); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("second identity bind: want failed precondition, got %v", err)
	}
	// Negative control: a cold sandbox's agent never accepts one.
	cag, crel, err := cold.m.agentOf(ctx, "box")
	if err != nil {
		t.Fatal(err)
	}
	defer crel()
	if err := cag.BindIdentity(ctx, []string{"PATH=/evil"}); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("identity bind on a cold sandbox: want failed precondition, got %v", err)
	}
}

// TestPoolMatch: a snapshot, another image or another instance type
// than the pool's goes cold and leaves the pool as it was.
func TestPoolMatch(t *testing.T) {
	r := poolRig(t, PoolSpec{Image: "debian-trixie", Instance: "basic", Size: 1})
	waitPool(t, r.m, "1 ready", func(p api.Pool) bool { return p.Ready == 1 })
	for _, req := range []api.CreateSandboxRequest{
		{Name: "other-image", Image: "alpine", Instance: "basic"},
		{Name: "other-type", Instance: "lite"},
	} {
		if _, _, err := plane(r.m).GetOrCreate(ctx, req, false); err != nil {
			t.Fatal(err)
		}
	}
	if p := r.m.Pools()[0]; p.Claims != 0 || p.Ready != 1 {
		t.Fatalf("non-matching creates changed the pool: %+v", p)
	}
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "match", Instance: "basic"}, false); err != nil {
		t.Fatal(err)
	}
	if p := r.m.Pools()[0]; p.Claims != 1 {
		t.Fatalf("a matching create did not claim: %+v", p)
	}
}

// TestPoolRefillBacksOffAndRecovers: refills that fail (a bad image,
// then a runtime that cannot start: a full disk, say) back off, keep
// what the pool has, and fill it again once the cause is gone.
func TestPoolRefillBacksOffAndRecovers(t *testing.T) {
	r := newRig(t)
	r.img.setErr(errdefs.NotFound("image debian-trixie not found"))
	r2 := poolRigFrom(t, r, PoolSpec{Image: "debian-trixie", Size: 2})
	p := waitPool(t, r2.m, "failures", func(p api.Pool) bool { return p.Failures >= 3 })
	if p.Ready != 0 || p.LastError == "" || p.RetryAt == nil {
		t.Fatalf("failing pool: %+v", p)
	}
	// Backing off: far fewer tries than a busy loop would make.
	time.Sleep(200 * time.Millisecond)
	if n := r2.m.Pools()[0].Failures; n > 12 {
		t.Fatalf("%d failed refills in ~0.2 s: not backing off", n)
	}
	r.img.setErr(nil) // the image is back
	p = waitPool(t, r2.m, "2 ready", func(p api.Pool) bool { return p.Ready == 2 })
	if p.LastError != "" || p.RetryAt != nil {
		t.Fatalf("recovered pool still reports its failure: %+v", p)
	}
	// Now the runtime fails (a full disk): a claim's refill fails, the
	// other member stays ready, and nothing of the failed ones is left.
	r.rt.mu.Lock()
	r.rt.failStart = errdefs.NoSpace("no space left on device")
	r.rt.mu.Unlock()
	before := r2.m.Pools()[0].Failures
	if _, _, err := plane(r2.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "c1"}, false); err != nil {
		t.Fatal(err)
	}
	waitPool(t, r2.m, "refill failures", func(p api.Pool) bool { return p.Failures >= before+2 })
	if p := r2.m.Pools()[0]; p.Ready != 1 {
		t.Fatalf("a failing refill drained the pool: %+v", p)
	}
	r.rfs.mu.Lock()
	mounted := len(r.rfs.mounted)
	r.rfs.mu.Unlock()
	if mounted != 2 { // c1 and the one ready member
		t.Fatalf("%d rootfs mounted, want 2: failed members left theirs", mounted)
	}
	r.rt.mu.Lock()
	r.rt.failStart = nil
	r.rt.mu.Unlock()
	waitPool(t, r2.m, "2 ready again", func(p api.Pool) bool { return p.Ready == 2 && p.LastError == "" })
}

// poolRigFrom is poolRig on r's fakes and store.
func poolRigFrom(t *testing.T, r *rig, specs ...PoolSpec) *rig {
	t.Helper()
	r.cfg.Pools = specs
	r.cfg.PoolBackoff = 10 * time.Millisecond
	r.m = New(r.cfg)
	r.h = durable.NewHost(durable.Config{Store: r.cfg.Store.(*sqlite.Store), Compute: r.m.Compute(nil), Logf: t.Logf, Now: r.now})
	attachControllers(t, r.m, r.h, r.now)
	pctx, cancel := context.WithCancel(context.Background())
	go r.m.RunPools(pctx)
	t.Cleanup(func() {
		cancel()
		if d := r.m.PoolsDone(); d != nil {
			<-d
		}
	})
	return r
}

// TestPoolPolicyRefusalReturnsMember: a create the operator policy
// refuses leaves no record and gives its reserved member back unused.
func TestPoolPolicyRefusalReturnsMember(t *testing.T) {
	r := policyRig(t)
	r2 := poolRigFrom(t, r, PoolSpec{Image: "debian-trixie", Size: 1})
	waitPool(t, r2.m, "1 ready", func(p api.Pool) bool { return p.Ready == 1 })
	t1 := policy.WithTenant(ctx, "t1")
	for _, n := range []string{"a", "b"} { // t1's quota is 2 sandboxes
		if _, _, err := plane(r2.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: n}, false); err != nil {
			t.Fatal(err)
		}
	}
	waitPool(t, r2.m, "1 ready", func(p api.Pool) bool { return p.Ready == 1 })
	r2.m.pools.mu.Lock()
	id := r2.m.pools.list[0].idle[0].id
	r2.m.pools.mu.Unlock()
	claims := r2.m.Pools()[0].Claims
	if _, _, err := plane(r2.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: "c"}, false); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("third sandbox: want resource exhausted, got %v", err)
	}
	p := r2.m.Pools()[0]
	r2.m.pools.mu.Lock()
	back := len(r2.m.pools.list[0].idle) == 1 && r2.m.pools.list[0].idle[0].id == id
	r2.m.pools.mu.Unlock()
	if !back || p.Claims != claims {
		t.Fatalf("refused create did not return its member: %+v", p)
	}
	if _, err := plane(r2.m).Get(ctx, "c"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("refused create left a record: %v", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
