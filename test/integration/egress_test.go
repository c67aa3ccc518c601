//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/weaken"
	"github.com/berth-sh/berth/network"
)

// egMainPolicy allows the test hosts and, to show they stay blocked
// whatever a policy says, every forbidden destination too.
func egMainPolicy(peerCIDR string) api.NetworkPolicy {
	return api.NetworkPolicy{
		Allow: []string{"api.internal.test", "pkg.internal.test", "rebind.test", "opened.test", egOpened, egControl + ":8080",
			egMetadata, egPrivate, egHostAddr, "127.0.0.1", peerCIDR},
		Inject: []api.InjectRule{{Host: "api.internal.test", SetHeaders: map[string]string{"Authorization": "Bearer ${secret:gh}"}}},
	}
}

// egBypass is one attempt to get past the policy. marker is what the
// attacker wanted to reach: it must be absent normally and present with
// the weaken switch off (the negative control).
type egBypass struct {
	name, cmd, marker, weak string
}

func egBypasses(peerIP, gw string) []egBypass {
	const c = "curl -sS -m 8 "
	return []egBypass{
		// An /etc/hosts entry (curl --resolve is the same client-side
		// override; /etc/hosts itself is a read-only bind in sandboxes).
		{"hosts-entry-http", c + "--resolve api.internal.test:80:" + egOther + " http://api.internal.test/", "server=other", weaken.EgressPin},
		{"hosts-entry-https", c + "--cacert /tmp/internet-ca.pem --resolve pkg.internal.test:443:" + egOther + " https://pkg.internal.test/", "server=other", weaken.EgressPin},
		{"bare-ip-http", c + "http://" + egOther + "/", "server=other", weaken.EgressPolicy},
		{"bare-ip-https", c + "-k https://" + egOther + "/", "server=other", weaken.EgressPolicy},
		{"sni-host-mismatch", c + "-H 'Host: other.test' https://api.internal.test/", "server=other", weaken.EgressHostMatch},
		{"dns-rebind", c + "http://rebind.test/", "server=private", weaken.EgressBlocklist},
		{"metadata", c + "http://" + egMetadata + "/", "server=metadata", weaken.EgressBlocklist},
		{"private-range", c + "http://" + egPrivate + "/", "server=private", weaken.EgressBlocklist},
		// Straight to the peer's address the frame never leaves the
		// bridge (isolated ports; the network package's tests hold that
		// negative control). Through the proxy, by naming the peer in the
		// Host header of a request to an allowed address:
		{"other-sandbox-direct", c + "http://" + peerIP + "/", "server=peer", ""},
		{"other-sandbox-via-proxy", c + "-H 'Host: " + peerIP + "' http://" + egAPI + "/", "server=peer", weaken.EgressBlocklist},
		{"host-address", c + "http://" + egHostAddr + ":" + egHostPort + "/", "server=host", weaken.EgressBlocklist},
		{"host-gateway", c + "http://" + gw + ":" + egHostPort + "/", "server=host", weaken.EgressBlocklist},
		// The host's loopback through the proxy, plain and IPv4-mapped.
		{"loopback-via-proxy", c + "-H 'Host: 127.0.0.1' http://" + egAPI + "/", "server=loopback", weaken.EgressBlocklist},
		{"loopback-v4-mapped", c + "-H 'Host: [::ffff:127.0.0.1]' http://" + egAPI + "/", "server=loopback", weaken.EgressBlocklist},
	}
}

func egRun(t *testing.T, d *egDaemon, name, cmd string) string {
	t.Helper()
	res, err := d.c.Exec(context.Background(), name, api.ExecRequest{Command: cmd, TimeoutMs: 120000})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", cmd, name, err)
	}
	return res.Stdout + res.Stderr
}

func egCreate(t *testing.T, d *egDaemon, w *egWorld, name string, p api.NetworkPolicy) api.Sandbox {
	t.Helper()
	sb, _, err := d.c.GetOrCreate(context.Background(), api.CreateSandboxRequest{Name: name, Network: &p})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if err := d.c.WriteFile(context.Background(), name, "/tmp/internet-ca.pem", bytes.NewReader(w.caPEM), 0o644); err != nil {
		t.Fatal(err)
	}
	return sb
}

// egPeer starts a sandbox serving "server=peer" on port 80.
func egPeer(t *testing.T, d *egDaemon, w *egWorld) string {
	sb := egCreate(t, d, w, "eg-peer", api.NetworkPolicy{})
	if _, err := d.c.StartProcess(context.Background(), "eg-peer", api.StartProcessRequest{User: "root",
		Command: "mkdir -p /tmp/www && echo server=peer > /tmp/www/index.html && exec python3 -m http.server 80 -d /tmp/www"}); err != nil {
		t.Fatal(err)
	}
	egRun(t, d, "eg-peer", "for i in $(seq 50); do curl -s localhost:80/ >/dev/null && break; sleep 0.1; done")
	return sb.IP
}

func TestEgress(t *testing.T) {
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("nsenter not installed")
	}
	w := setupEgressWorld(t)
	gw := network.Gateway(netip.MustParsePrefix(egSubnet)).String()
	peerCIDR := egSubnet

	d := startEgressDaemon(t, w, "")
	ctx := context.Background()
	if err := d.c.SetSecret(ctx, "gh", w.secret); err != nil {
		t.Fatal(err)
	}
	if list, err := d.c.ListSecrets(ctx); err != nil || len(list) != 1 || list[0].Name != "gh" {
		t.Fatalf("secrets: %+v %v", list, err)
	}
	peerIP := egPeer(t, d, w)
	egCreate(t, d, w, "eg-main", egMainPolicy(peerCIDR))
	egCreate(t, d, w, "eg-off", api.NetworkPolicy{})

	t.Run("internet-off", func(t *testing.T) {
		// The negative control: the listener answers when reached
		// without berth.
		if out := directGet(t, "http://"+egControl+":8080/"); !strings.Contains(out, "server=control") {
			t.Fatalf("control listener: %q", out)
		}
		for _, cmd := range []string{
			"curl -sS -m 5 http://" + egControl + ":8080/",
			"curl -sS -m 5 http://api.internal.test/",
			"curl -sS -m 5 -k https://" + egAPI + "/",
			"getent hosts api.internal.test || echo no-name",
		} {
			if out := egRun(t, d, "eg-off", cmd); strings.Contains(out, "server=") || strings.Contains(out, egAPI) {
				t.Errorf("%q got out: %q", cmd, out)
			}
		}
		// UDP does not leave either; the control datagram sent without
		// berth arrives.
		udp := "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); [s.sendto(b'x', ('" + egControl + "', 9999)) for _ in range(3)]\""
		egRun(t, d, "eg-off", udp)
		egRun(t, d, "eg-main", udp)
		time.Sleep(300 * time.Millisecond)
		if n := w.udpSeen.Load(); n != 0 {
			t.Errorf("%d UDP datagrams got out", n)
		}
		directUDP(t, egControl+":9999")
		for i := 0; i < 20 && w.udpSeen.Load() == 0; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if w.udpSeen.Load() == 0 {
			t.Errorf("UDP control datagram did not arrive: the probe proves nothing")
		}
		// The same command does send from a sandbox whose policy lets
		// everything out (UDP is forwarded only then).
		egCreate(t, d, w, "eg-open", api.NetworkPolicy{Internet: true})
		before := w.udpSeen.Load()
		egRun(t, d, "eg-open", udp)
		for i := 0; i < 20 && w.udpSeen.Load() == before; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if w.udpSeen.Load() == before {
			t.Errorf("UDP from a sandbox with internet on did not arrive: the probe command proves nothing")
		}
		if err := d.c.Destroy(ctx, "eg-open"); err != nil {
			t.Fatal(err)
		}
		// The same listener is reachable from a sandbox whose policy
		// allows its address and port (non-HTTP port, CIDR rule).
		if out := egRun(t, d, "eg-main", "curl -sS -m 5 http://"+egControl+":8080/"); !strings.Contains(out, "server=control") {
			t.Fatalf("allowed address:port: %q", out)
		}
	})

	t.Run("allowlist", func(t *testing.T) {
		if out := egRun(t, d, "eg-main", "curl -sS -m 8 http://api.internal.test/"); !strings.Contains(out, "server=api host=api.internal.test") {
			t.Errorf("allowed HTTP: %q", out)
		}
		if out := egRun(t, d, "eg-main", "curl -sS -m 8 --cacert /tmp/internet-ca.pem https://pkg.internal.test/"); !strings.Contains(out, "server=api host=pkg.internal.test auth=none") {
			t.Errorf("allowed HTTPS (tunnelled, not intercepted): %q", out)
		}
		if out := egRun(t, d, "eg-main", "getent hosts api.internal.test; getent hosts other.test || echo other-nxdomain"); !strings.Contains(out, egAPI) || !strings.Contains(out, "other-nxdomain") {
			t.Errorf("resolver: %q", out)
		}
		for _, cmd := range []string{"curl -sS -m 8 http://other.test/", "curl -sS -m 8 --cacert /tmp/internet-ca.pem https://other.test/",
			"curl -sS -m 8 --resolve other.test:80:" + egOther + " http://other.test/"} {
			if out := egRun(t, d, "eg-main", cmd); strings.Contains(out, "server=other") {
				t.Errorf("%q reached other.test: %q", cmd, out)
			}
		}
		if out := egRun(t, d, "eg-main", "curl -sS -m 8 http://"+egOpened+"/"); !strings.Contains(out, "server=opened") {
			t.Errorf("operator-opened private range: %q", out)
		}
		// A host rule with a port admits other TCP to the addresses the
		// resolver gave for the name, not the bare address.
		if _, err := d.c.SetNetwork(ctx, "eg-off", api.NetworkPolicy{Allow: []string{"control.test:8080"}}); err != nil {
			t.Fatal(err)
		}
		if out := egRun(t, d, "eg-off", "curl -sS -m 5 http://"+egControl+":8080/"); strings.Contains(out, "server=control") {
			t.Errorf("bare address admitted by a host rule: %q", out)
		}
		if out := egRun(t, d, "eg-off", "curl -sS -m 5 http://control.test:8080/"); !strings.Contains(out, "server=control") {
			t.Errorf("resolved name on a non-HTTP port: %q", out)
		}
		if _, err := d.c.SetNetwork(ctx, "eg-off", api.NetworkPolicy{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("injection", func(t *testing.T) {
		before := len(w.authSeen())
		checks := map[string]string{
			"curl":   "curl -sS -m 10 https://api.internal.test/curl",
			"python": `python3 -c 'import urllib.request; print(urllib.request.urlopen("https://api.internal.test/py", timeout=10).read().decode())'`,
			"node":   `node -e 'fetch("https://api.internal.test/node").then(r => r.text()).then(t => console.log(t), e => { console.log(String(e), e.cause); process.exit(1) })'`,
			"git":    "rm -rf /tmp/clone && git clone -q https://api.internal.test/repo.git /tmp/clone && cat /tmp/clone/README",
		}
		for tool, cmd := range checks {
			want := "server=api host=api.internal.test auth=match"
			if tool == "git" {
				want = "hello from repo"
			}
			if out := egRun(t, d, "eg-main", cmd); !strings.Contains(out, want) {
				t.Errorf("%s through injection: %q", tool, out)
			}
		}
		seen := w.authSeen()[before:]
		if len(seen) < 4 {
			t.Fatalf("upstream saw %d requests", len(seen))
		}
		for _, a := range seen {
			if a != "Bearer "+w.secret {
				t.Fatalf("upstream received Authorization %q", a)
			}
		}
		// The secret is nowhere in the sandbox: no process environment,
		// no file. The pattern travels base64-encoded so the command
		// itself does not hold it.
		b64 := base64.StdEncoding.EncodeToString([]byte(w.secret))
		search := `P=$(echo ` + b64 + ` | base64 -d); n=0; for f in /proc/[0-9]*/environ; do if tr '\0' '\n' < $f 2>/dev/null | grep -qF "$P"; then n=$((n+1)); fi; done; echo env=$n; ` +
			`grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "$P" / ; echo end`
		// Control: the search finds the secret when it is there.
		ctl := egRun(t, d, "eg-main", `P=$(echo `+b64+` | base64 -d); echo "$P" > /tmp/canary; `+search[strings.Index(search, "n=0"):]+"; rm -f /tmp/canary")
		if !strings.Contains(ctl, "/tmp/canary") {
			t.Fatalf("the search does not find a planted secret: %q", ctl)
		}
		if out := egRun(t, d, "eg-main", search); !strings.Contains(out, "env=0\nend") {
			t.Fatalf("secret found in the sandbox: %q", out)
		}
		env := egRun(t, d, "eg-main", "env")
		for _, k := range []string{"SSL_CERT_FILE=", "NODE_EXTRA_CA_CERTS=", "REQUESTS_CA_BUNDLE="} {
			if !strings.Contains(env, k) {
				t.Errorf("sandbox env lacks %s", k)
			}
		}
	})

	t.Run("bypasses", func(t *testing.T) {
		// First lookup of rebind.test answers a public address: fine.
		if out := egRun(t, d, "eg-main", "curl -sS -m 8 http://rebind.test/"); !strings.Contains(out, "server=api") {
			t.Fatalf("rebind.test first answer: %q", out)
		}
		for _, b := range egBypasses(peerIP, gw) {
			if out := egRun(t, d, "eg-main", b.cmd); strings.Contains(out, b.marker) {
				t.Errorf("%s: got through: %q", b.name, out)
			} else {
				t.Logf("%s: blocked: %s", b.name, strings.TrimSpace(out))
			}
		}
	})

	t.Run("runtime-policy", func(t *testing.T) {
		// A connection to api.internal.test stays open across a change
		// that still allows it; other.test opens up without a restart.
		if _, err := d.c.StartProcess(ctx, "eg-main", api.StartProcessRequest{ID: "keep", Command: `python3 -c '
import http.client, os, time
c = http.client.HTTPConnection("api.internal.test", timeout=10)
c.request("GET", "/1"); print(c.getresponse().read().decode().strip(), flush=True)
open("/tmp/r1", "w").close()
while not os.path.exists("/tmp/go"): time.sleep(0.05)
c.request("GET", "/2"); print("second", c.getresponse().read().decode().strip(), flush=True)
'`}); err != nil {
			t.Fatal(err)
		}
		egRun(t, d, "eg-main", "for i in $(seq 100); do test -e /tmp/r1 && break; sleep 0.1; done")
		before, _ := d.c.Get(ctx, "eg-main")
		p := egMainPolicy(peerCIDR)
		p.Allow = append(p.Allow, "other.test")
		if _, err := d.c.SetNetwork(ctx, "eg-main", p); err != nil {
			t.Fatal(err)
		}
		egRun(t, d, "eg-main", "touch /tmp/go")
		if _, err := d.c.WaitForExit(ctx, "eg-main", "keep", 20*time.Second); err != nil {
			t.Fatal(err)
		}
		logs, err := d.c.ProcessLogs(ctx, "eg-main", "keep")
		if err != nil || !strings.Contains(string(logs.Stdout), "second server=api") {
			t.Fatalf("still-allowed connection after the change: %+v %v", logs, err)
		}
		if out := egRun(t, d, "eg-main", "curl -sS -m 8 http://other.test/"); !strings.Contains(out, "server=other") {
			t.Fatalf("newly allowed host: %q", out)
		}
		after, _ := d.c.Get(ctx, "eg-main")
		if after.StartedAt == nil || before.StartedAt == nil || !after.StartedAt.Equal(*before.StartedAt) {
			t.Fatalf("the sandbox restarted")
		}
		if _, err := d.c.SetNetwork(ctx, "eg-main", egMainPolicy(peerCIDR)); err != nil {
			t.Fatal(err)
		}
		if out := egRun(t, d, "eg-main", "curl -sS -m 8 http://other.test/"); strings.Contains(out, "server=other") {
			t.Fatalf("removed host still allowed: %q", out)
		}
		if got, err := d.c.GetNetwork(ctx, "eg-main"); err != nil || len(got.Allow) != len(egMainPolicy(peerCIDR).Allow) {
			t.Fatalf("policy read back: %+v %v", got, err)
		}
	})

	t.Run("audit", func(t *testing.T) {
		evs, err := d.c.EgressLog(ctx, "eg-main", 0)
		if err != nil {
			t.Fatal(err)
		}
		has := func(f func(e api.EgressEvent) bool) bool {
			for _, e := range evs {
				if f(e) {
					return true
				}
			}
			return false
		}
		want := map[string]func(e api.EgressEvent) bool{
			"allowed HTTP with bytes": func(e api.EgressEvent) bool {
				return e.Kind == api.EgressHTTP && e.Host == "api.internal.test" && e.Allowed && e.BytesIn > 0 && e.BytesOut > 0
			},
			"tunnelled TLS": func(e api.EgressEvent) bool {
				return e.Kind == api.EgressTLS && e.Host == "pkg.internal.test" && e.Allowed
			},
			"injected HTTPS": func(e api.EgressEvent) bool {
				return e.Kind == api.EgressHTTPS && e.Injected && e.Allowed && e.BytesIn > 0
			},
			"injected git request": func(e api.EgressEvent) bool {
				return e.Injected && e.Method == "GET" && strings.HasPrefix(e.Path, "/repo.git/") && e.Status == 200
			},
			"denied host":   func(e api.EgressEvent) bool { return e.Host == "other.test" && !e.Allowed && e.Rule == "default" },
			"denied lookup": func(e api.EgressEvent) bool { return e.Kind == api.EgressDNS && e.Host == "other.test" && !e.Allowed },
			"metadata": func(e api.EgressEvent) bool {
				return e.IP == egMetadata && !e.Allowed && strings.HasPrefix(e.Rule, "blocked:169.254")
			},
			"private": func(e api.EgressEvent) bool {
				return e.IP == egPrivate && !e.Allowed && strings.HasPrefix(e.Rule, "blocked:10.")
			},
			"other sandbox": func(e api.EgressEvent) bool {
				return e.Host == peerIP && !e.Allowed && e.Rule == "blocked:sandbox-subnet"
			},
			"host": func(e api.EgressEvent) bool {
				return e.IP == egHostAddr && !e.Allowed && strings.HasPrefix(e.Rule, "blocked:host")
			},
			"host mismatch": func(e api.EgressEvent) bool { return e.Rule == "host-mismatch" && e.Host == "other.test" },
			"rebind":        func(e api.EgressEvent) bool { return e.Host == "rebind.test" && !e.Allowed },
			"bare IP":       func(e api.EgressEvent) bool { return e.Kind == api.EgressHTTP && e.Host == egOther && !e.Allowed },
			"policy change": func(e api.EgressEvent) bool {
				return e.Host == "other.test" && e.Allowed && e.Rule == "allow:other.test"
			},
		}
		for what, f := range want {
			if !has(f) {
				t.Errorf("audit log lacks %s", what)
			}
		}
		if t.Failed() {
			for _, e := range evs {
				t.Logf("%+v", e)
			}
		}
		out, err := exec.Command("nsenter", "--net="+nsPath(egHost), "--", filepath.Join(binDir, "berth"),
			"--url", "http://"+egListen, "--api-key", d.key, "egress", "log", "eg-main").CombinedOutput()
		if err != nil || !strings.Contains(string(out), egMetadata) || !strings.Contains(string(out), "denied") {
			t.Fatalf("berth egress log: %v\n%s", err, out)
		}
	})

	t.Run("latency", func(t *testing.T) {
		// Logged figures (no assertion): curl's time_total per HTTPS
		// request on a new connection, p50 of 40.
		loop := func(args string) string {
			return `for i in $(seq 40); do curl -sS -o /dev/null -w '%{time_total}\n' ` + args + `; done`
		}
		direct, err := exec.Command("nsenter", "--net="+nsPath(egHost), "--", "sh", "-c",
			loop("--cacert "+w.caFile+" --resolve api.internal.test:443:"+egAPI+" https://api.internal.test/")).CombinedOutput()
		if err != nil {
			t.Fatalf("direct: %v %s", err, direct)
		}
		tunnel := egRun(t, d, "eg-main", loop("--cacert /tmp/internet-ca.pem --resolve pkg.internal.test:443:"+egAPI+" https://pkg.internal.test/"))
		intercept := egRun(t, d, "eg-main", loop("--resolve api.internal.test:443:"+egAPI+" https://api.internal.test/"))
		t.Logf("HTTPS request p50 (curl, new connection each): direct %s, tunnelled (SNI) %s, intercepted with injection %s",
			p50s(t, string(direct)), p50s(t, tunnel), p50s(t, intercept))
	})

	t.Run("daemon-restart", func(t *testing.T) {
		// A restarted daemon adopts the running sandbox with its policy:
		// the proxy, the resolver and injection work for it at once.
		d.term()
		d = startEgressDaemonOpts(t, w, "", false)
		if sb, err := d.c.Get(ctx, "eg-main"); err != nil || sb.State != api.StateRunning {
			t.Fatalf("after restart: %+v %v", sb, err)
		}
		// The audit log survived the restart.
		evs, err := d.c.EgressLog(ctx, "eg-main", 0)
		kept := false
		for _, e := range evs {
			kept = kept || (e.IP == egMetadata && !e.Allowed)
		}
		if err != nil || !kept {
			t.Errorf("audit log after restart lacks the metadata refusal (%d events, %v)", len(evs), err)
		}
		for cmd, want := range map[string]string{
			"curl -sS -m 8 http://api.internal.test/":                                  "server=api",
			"curl -sS -m 8 https://api.internal.test/":                                 "auth=match",
			"curl -sS -m 8 --resolve other.test:80:" + egOther + " http://other.test/": "not allowed",
		} {
			if out := egRun(t, d, "eg-main", cmd); !strings.Contains(out, want) {
				t.Errorf("after restart, %q: %q", cmd, out)
			}
		}
	})

	// Negative controls: each bypass gets through once its one protection
	// is off.
	d.stop()
	for _, weak := range []string{weaken.EgressPin, weaken.EgressPolicy, weaken.EgressHostMatch, weaken.EgressBlocklist} {
		t.Run("weakened-"+weak, func(t *testing.T) {
			wd := startEgressDaemon(t, w, weak)
			defer wd.stop()
			if err := wd.c.SetSecret(ctx, "gh", w.secret); err != nil {
				t.Fatal(err)
			}
			peer := ""
			if weak == weaken.EgressBlocklist {
				peer = egPeer(t, wd, w)
			}
			egCreate(t, wd, w, "eg-main", egMainPolicy(peerCIDR))
			for _, b := range egBypasses(peer, gw) {
				if b.weak != weak {
					continue
				}
				if out := egRun(t, wd, "eg-main", b.cmd); !strings.Contains(out, b.marker) {
					t.Errorf("%s: with %s off the probe still fails, so it proves nothing: %q", b.name, weak, out)
				}
			}
		})
	}
}

// p50s returns the median of newline-separated seconds, as milliseconds.
func p50s(t *testing.T, out string) string {
	var v []float64
	for _, f := range strings.Fields(out) {
		var x float64
		if _, err := fmt.Sscanf(f, "%g", &x); err == nil {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		t.Fatalf("no timings in %q", out)
	}
	sort.Float64s(v)
	return fmt.Sprintf("%.2fms", v[len(v)/2]*1000)
}
