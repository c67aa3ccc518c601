//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// poolProbe is what TestPoolClaimedLikeCold compares, read from inside
// the sandbox (and its journal and policy from the API). Host-specific
// values (its address, its host id range) are masked.
const poolProbe = `
echo "hostname=$(cat /proc/sys/kernel/hostname)"
echo "etc-hostname=$(cat /etc/hostname)"
echo "--- hosts"; sed -E 's/^[0-9.]+\t/IP\t/' /etc/hosts
echo "--- resolv"; cat /etc/resolv.conf
echo "--- env"; env | grep -v -e '^PWD=' -e '^SHLVL=' -e '^_=' -e '^OLDPWD=' | sort
echo "--- status"; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp|Seccomp_filters|Uid|Gid|Groups):' /proc/self/status
echo "--- uid_map"; awk '{print $1, "HOST", $3}' /proc/self/uid_map
echo "--- gid_map"; awk '{print $1, "HOST", $3}' /proc/self/gid_map
echo "--- cgroup"; for f in cpu.max cpu.weight memory.max memory.swap.max pids.max cpu/cpu.cfs_quota_us cpu/cpu.cfs_period_us cpu/cpu.shares memory/memory.limit_in_bytes memory/memory.memsw.limit_in_bytes pids/pids.max; do [ -e /sys/fs/cgroup/$f ] && echo "$f $(cat /sys/fs/cgroup/$f 2>&1)"; done; true
echo "--- net"; ls /sys/class/net; awk 'NR>1 {print $1, $2, $8}' /proc/net/route
echo "--- mounts"; awk '{print $2, $3}' /proc/self/mounts | sort
echo "--- egress"; (timeout 3 bash -c 'exec 3<>/dev/tcp/1.1.1.1/80' && echo open) 2>/dev/null || echo closed
`

func observeSandbox(t *testing.T, name string) (inside string, journal []string, pol api.NetworkPolicy) {
	t.Helper()
	res := run(t, name, poolProbe)
	if res.ExitCode != 0 {
		t.Fatalf("probe in %s: exit %d: %s %s", name, res.ExitCode, res.Stdout, res.Stderr)
	}
	js, err := d.c.Journal(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		if j.Op == "container.start" {
			journal = nil // the journal keeps earlier sandboxes of the name: this one's begins here
		}
		journal = append(journal, j.Op)
	}
	if pol, err = d.c.GetNetwork(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	return res.Stdout, journal, pol
}

// TestPoolClaimedLikeCold creates a sandbox cold on the suite's daemon
// (no pool), then the same one on a daemon with a warm pool, where it is
// claimed, and compares them from inside and through the API: hostname,
// /etc files, env of an exec (a secret-looking variable and a PATH
// override among it: env stays on the warm path), /proc/self/status
// (capabilities, no_new_privs, seccomp), uid and gid maps, cgroup limits,
// network, egress policy and reachability, and the journal's operations.
func TestPoolClaimedLikeCold(t *testing.T) {
	ctx := context.Background()
	req := api.CreateSandboxRequest{Name: "it-pool-eq", Instance: "basic",
		Env:     map[string]string{"API_TOKEN": "tok-123", "PATH": "/opt/x/bin:/usr/local/bin:/usr/bin:/bin"},
		Labels:  map[string]string{"team": "eq"},
		Network: &api.NetworkPolicy{Allow: []string{"example.com"}, Deny: []string{}, Inject: []api.InjectRule{}},
	}
	sandbox(t, req)
	coldIn, coldJournal, coldPol := observeSandbox(t, req.Name)
	if err := d.c.Destroy(ctx, req.Name); err != nil {
		t.Fatal(err)
	}

	// The same daemon with a warm pool; the suite's comes back at the end.
	d.stop()
	d = nil
	t.Cleanup(func() {
		if d != nil {
			d.stop()
		}
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Errorf("restart the suite's daemon: %v", err)
		}
	})
	var err error
	if d, err = startDaemon(nil, "--pool", "debian-trixie=2"); err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, 2)
	sandbox(t, req)
	warmIn, warmJournal, warmPol := observeSandbox(t, req.Name)
	p := pools(t)[0]
	if p.Claims != 1 || p.Misses != 0 {
		t.Fatalf("the create did not claim a member: %+v", p)
	}
	for _, want := range []string{"hostname=it-pool-eq\n", "API_TOKEN=tok-123\n", "PATH=/opt/x/bin:", "BERTH_SANDBOX=it-pool-eq\n", "1073741824\n", "25000"} {
		if !strings.Contains(coldIn, want) {
			t.Fatalf("cold sandbox lacks %q:\n%s", want, coldIn)
		}
	}
	if coldIn != warmIn {
		t.Errorf("claimed sandbox differs from cold:\n--- cold\n%s\n--- claimed\n%s", coldIn, warmIn)
	}
	if !slices.Equal(coldJournal, warmJournal) {
		t.Errorf("journal: cold %q, claimed %q", coldJournal, warmJournal)
	}
	if cj, wj := mustJSON(t, coldPol), mustJSON(t, warmPol); cj != wj {
		t.Errorf("egress policy: cold %s, claimed %s", cj, wj)
	}
	// The journal says it was a claim, and when.
	js, _ := d.c.Journal(ctx, req.Name)
	var start string
	for _, j := range js {
		if j.Op == "start" {
			start = j.Detail
		}
	}
	if !strings.Contains(start, "warm pool") {
		t.Errorf("start entry %q does not name the pool", start)
	}
	// A destroyed claim's member is gone for good: the pool refills with
	// new ones.
	sb, _ := d.c.Get(ctx, req.Name)
	if err := d.c.Destroy(ctx, req.Name); err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, 2)
	if out, _ := execCmd("sh", "-c", "ls "+itRunDir+"/sandboxes"); strings.Contains(out, sb.ID) {
		t.Errorf("destroyed claim's run dir %s is still there", sb.ID)
	}
}

// TestPoolMemberPosture: the posture and isolation probes of the
// adversarial suite run on claimed members when it is run with
// BERTH_ADV_POOL (scripts/test.sh); here, a quick check that a claimed
// member's init is frozen no more, and that the idle ones are.
func TestPoolMembersFrozen(t *testing.T) {
	d.stop()
	d = nil
	t.Cleanup(func() {
		if d != nil {
			d.stop()
		}
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Errorf("restart the suite's daemon: %v", err)
		}
	})
	var err error
	if d, err = startDaemon(nil, "--pool", "debian-trixie=2"); err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, 2)
	// cgroup v2: cgroup.events says "frozen 1"; v1: freezer.state FROZEN.
	frozen := regexp.MustCompile(`(?m)^(frozen 1|FROZEN)$`)
	base := strings.TrimPrefix(itRunDir, "/run/")
	out, _ := execCmd("sh", "-c", "cat /sys/fs/cgroup/"+base+"/*/cgroup.events /sys/fs/cgroup/freezer/"+base+"/*/freezer.state 2>/dev/null")
	if n := len(frozen.FindAllString(out, -1)); n != 2 {
		t.Fatalf("%d frozen cgroups, want the 2 idle members:\n%s", n, out)
	}
	sb := sandbox(t, api.CreateSandboxRequest{Name: "it-pool-thaw"})
	out, _ = execCmd("sh", "-c", "cat /sys/fs/cgroup/"+base+"/"+sb.ID+"/cgroup.events /sys/fs/cgroup/freezer/"+base+"/"+sb.ID+"/freezer.state 2>/dev/null")
	if frozen.MatchString(out) || !strings.Contains(out, "THAWED") && !strings.Contains(out, "frozen 0") {
		t.Fatalf("claimed sandbox's cgroup: %s", out)
	}
	if p := pools(t)[0]; p.Claims != 1 {
		t.Fatalf("the create did not claim: %+v", p)
	}
}

func pools(t *testing.T) []api.Pool {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+d.listen+"/v1/pools", nil)
	req.Header.Set("Authorization", "Bearer "+readKey(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list api.PoolList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Pools) == 0 {
		t.Fatalf("GET /v1/pools: %d %v %+v", resp.StatusCode, err, list)
	}
	return list.Pools
}

func waitPoolReady(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		p := pools(t)[0]
		if p.Ready >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never had %d ready: %+v", n, p)
		}
		time.Sleep(50 * time.Millisecond)
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

// TestPoolBurstBeyondBound: 40 creates at once against a pool of 4, one
// start slot and a queue of 2. The pool serves 4 at once, the slot and
// the queue a few more, and the rest are refused; no create is answered
// 5xx, every 429 carries Retry-After, every sandbox that exists right
// after the burst is one whose create succeeded and it runs, the refused
// ones do not exist, and once the created ones are destroyed and the pool
// has refilled the host holds just the pool's members.
func TestPoolBurstBeyondBound(t *testing.T) {
	const size, n = 4, 40
	d.stop()
	d = nil
	t.Cleanup(func() {
		if d != nil {
			d.stop()
		}
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Errorf("restart the suite's daemon: %v", err)
		}
	})
	var err error
	if d, err = startDaemon(nil, "--pool", "debian-trixie="+strconv.Itoa(size),
		"--start-limit", "1", "--start-queue", "2", "--start-wait", "20s"); err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, size)
	ctx := context.Background()
	key := readKey(t)
	type answer struct {
		name   string
		status int
		retry  string
		body   string
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &answers[i]
			a.name = fmt.Sprintf("it-pool-burst-%d", i)
			body := fmt.Sprintf(`{"name":%q}`, a.name)
			req, _ := http.NewRequest("POST", "http://"+d.listen+"/v1/sandboxes", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			<-start
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				a.body = err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			a.status, a.retry, a.body = resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
		}()
	}
	close(start)
	wg.Wait()
	t.Cleanup(func() {
		for _, a := range answers {
			_ = d.c.Destroy(context.Background(), a.name)
		}
	})
	created, refused := map[string]bool{}, map[string]bool{}
	counts := map[int]int{}
	for _, a := range answers {
		counts[a.status]++
		switch {
		case a.status == http.StatusCreated:
			created[a.name] = true
		case a.status == http.StatusTooManyRequests:
			refused[a.name] = true
			if s, err := strconv.Atoi(a.retry); err != nil || s < 1 {
				t.Errorf("%s: 429 with Retry-After %q: %s", a.name, a.retry, a.body)
			}
		default:
			t.Errorf("%s: answered %d: %s", a.name, a.status, a.body)
		}
	}
	t.Logf("answers by status: %v", counts)
	if len(created) < size {
		t.Errorf("%d creates succeeded, want at least the pool's %d", len(created), size)
	}
	if len(refused) == 0 {
		t.Errorf("no create was refused: the bound (1 slot, queue of 2) did not hold")
	}
	// Right after the burst: what exists is exactly what was created, and
	// it runs.
	list, err := d.c.List(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sb := range list {
		if !strings.HasPrefix(sb.Name, "it-pool-burst-") {
			continue
		}
		seen[sb.Name] = true
		if !created[sb.Name] || sb.State != api.StateRunning {
			t.Errorf("half-made: %s is %s (its create answered %v)", sb.Name, sb.State, created[sb.Name])
		}
	}
	for name := range created {
		if !seen[name] {
			t.Errorf("%s was created but is not listed", name)
		}
	}
	for name := range refused {
		if _, err := d.c.Get(ctx, name); !errdefs.IsKind(err, errdefs.ErrNotFound) {
			t.Errorf("refused %s: get = %v, want not found", name, err)
		}
	}
	// Nothing left behind: with the created ones gone and the pool full
	// again, the host holds the pool's members and nothing else.
	for name := range created {
		if err := d.c.Destroy(ctx, name); err != nil {
			t.Errorf("destroy %s: %v", name, err)
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		p := pools(t)[0]
		if p.Ready == size && p.Starting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not refill: %+v", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c := takeCensus(t)
	if len(c.Containers) != size || len(c.Netns) != size {
		t.Errorf("after the burst, %d containers and %d netns, want the pool's %d: %+v", len(c.Containers), len(c.Netns), size, c)
	}
	if list, _ := d.c.List(ctx, "", nil); len(list) != 0 {
		t.Errorf("sandboxes left: %+v", list)
	}
}

// TestPoolOfSnapshot: a pool whose members start from a snapshot serves
// the creates that restore it, with the snapshot's files and the
// request's identity; a create of the bare image does not take one of its
// members, and the snapshot cannot be deleted while members stand on it.
func TestPoolOfSnapshot(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-pool-snap-src"})
	run(t, "it-pool-snap-src", "mkdir -p /home/user/app && echo deps-present > /home/user/app/marker")
	sn, err := d.c.Snapshot(ctx, "it-pool-snap-src", api.SnapshotRequest{Name: "pool"})
	if err != nil {
		t.Fatal(err)
	}
	// The cold restore, for comparison.
	sandbox(t, api.CreateSandboxRequest{Name: "it-pool-snap-cold", Snapshot: sn.ID, Env: map[string]string{"K": "v"}})
	coldIn, coldJournal, _ := observeSandbox(t, "it-pool-snap-cold")
	if err := d.c.Destroy(ctx, "it-pool-snap-cold"); err != nil {
		t.Fatal(err)
	}

	d.stop()
	d = nil
	t.Cleanup(func() {
		if d != nil {
			d.stop()
		}
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Errorf("restart the suite's daemon: %v", err)
		}
		_ = d.c.DeleteSnapshot(context.Background(), sn.ID)
	})
	if d, err = startDaemon(nil, "--pool", "debian-trixie=2,snapshot="+sn.ID); err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, 2)
	if p := pools(t)[0]; p.Snapshot != sn.ID {
		t.Fatalf("pool: %+v", p)
	}
	// A bare create does not claim a snapshot member (negative control).
	sandbox(t, api.CreateSandboxRequest{Name: "it-pool-snap-bare"})
	if p := pools(t)[0]; p.Claims != 0 {
		t.Fatalf("a create without the snapshot claimed a member: %+v", p)
	}
	if r := run(t, "it-pool-snap-bare", "cat /home/user/app/marker 2>&1 || true"); strings.Contains(r.Stdout, "deps-present") {
		t.Fatalf("the bare sandbox has the snapshot's files")
	}
	// The snapshot is pinned by the members.
	if err := d.c.DeleteSnapshot(ctx, sn.ID); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("delete a snapshot members stand on: %v", err)
	}
	sandbox(t, api.CreateSandboxRequest{Name: "it-pool-snap-cold", Snapshot: sn.ID, Env: map[string]string{"K": "v"}})
	if p := pools(t)[0]; p.Claims != 1 {
		t.Fatalf("the restore did not claim a member: %+v", p)
	}
	warmIn, warmJournal, _ := observeSandbox(t, "it-pool-snap-cold")
	if coldIn != warmIn {
		t.Errorf("claimed restore differs from cold:\n--- cold\n%s\n--- claimed\n%s", coldIn, warmIn)
	}
	if !slices.Equal(coldJournal, warmJournal) {
		t.Errorf("journal: cold %q, claimed %q", coldJournal, warmJournal)
	}
	if r := run(t, "it-pool-snap-cold", "cat /home/user/app/marker"); r.Stdout != "deps-present\n" {
		t.Fatalf("claimed restore's files: %q", r.Stdout)
	}
}
