//go:build adversarial

package adversarial

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/weaken"
	"github.com/vishvananda/netns"
)

// sideNet is a network namespace the test owns, joined to the host by a
// veth, holding listeners on addresses of the ranges a sandbox must never
// reach (private, CGNAT, link-local). The host routes those /32s into it,
// so the only thing between a sandbox and them is berth's policy.
type sideNet struct {
	ns       string
	hostVeth string
	hostIP   string            // the host's end of the veth: "another host address"
	targets  map[string]string // range name -> address
	ula      string            // an IPv6 unique-local address in the side net
	port     int               // TCP listener on every side-net address
	udpPort  int               // UDP echo on every side-net address
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

func newSideNet(t *testing.T) *sideNet {
	t.Helper()
	dg, _ := strconv.Atoi(advDigit())
	s := &sideNet{
		ns: "berthadv" + advDigit() + "side", hostVeth: "advside" + advDigit(),
		hostIP: fmt.Sprintf("203.0.113.%d", dg*4+1),
		targets: map[string]string{
			"10/8":       fmt.Sprintf("10.99.%d.10", dg),
			"172.16/12":  fmt.Sprintf("172.31.%d.10", dg),
			"192.168/16": fmt.Sprintf("192.168.%d.10", 200+dg),
			"100.64/10":  fmt.Sprintf("100.99.%d.10", dg),
			"169.254/16": fmt.Sprintf("169.254.99.%d", dg),
		},
	}
	peer := fmt.Sprintf("203.0.113.%d", dg*4+2)
	s.ula = fmt.Sprintf("fd42:be27:ad5::%d", dg)
	exec.Command("ip", "netns", "del", s.ns).Run()
	exec.Command("ip", "link", "del", s.hostVeth).Run()
	sh(t, "ip", "netns", "add", s.ns)
	t.Cleanup(func() {
		for _, a := range s.targets {
			exec.Command("ip", "route", "del", a+"/32").Run()
		}
		exec.Command("ip", "link", "del", s.hostVeth).Run()
		exec.Command("ip", "netns", "del", s.ns).Run()
	})
	sh(t, "ip", "link", "add", s.hostVeth, "type", "veth", "peer", "name", "eth0", "netns", s.ns)
	sh(t, "ip", "addr", "add", s.hostIP+"/30", "dev", s.hostVeth)
	sh(t, "ip", "link", "set", s.hostVeth, "up")
	in := func(args ...string) { sh(t, append([]string{"ip", "netns", "exec", s.ns}, args...)...) }
	in("ip", "link", "set", "lo", "up")
	in("ip", "addr", "add", peer+"/30", "dev", "eth0")
	in("ip", "link", "set", "eth0", "up")
	in("ip", "route", "add", "default", "via", s.hostIP)
	for _, a := range s.targets {
		in("ip", "addr", "add", a+"/32", "dev", "lo")
		sh(t, "ip", "route", "add", a+"/32", "via", peer, "dev", s.hostVeth)
	}
	hostULA := fmt.Sprintf("fd42:be27:ad5::1:%d", dg)
	in("ip", "-6", "addr", "add", s.ula+"/128", "dev", "eth0", "nodad")
	sh(t, "ip", "-6", "addr", "add", hostULA+"/128", "dev", s.hostVeth, "nodad")
	in("ip", "-6", "route", "add", hostULA+"/128", "dev", "eth0")
	sh(t, "ip", "-6", "route", "add", s.ula+"/128", "dev", s.hostVeth, "src", hostULA)
	t.Cleanup(func() { exec.Command("ip", "-6", "route", "del", s.ula+"/128").Run() })
	l := listenIn(t, s.ns, ":0")
	s.port = l.Addr().(*net.TCPAddr).Port
	var addrs []string
	for _, a := range s.targets {
		addrs = append(addrs, a)
	}
	s.udpPort = udpEchoIn(t, s.ns, addrs)
	// Positive control: the host itself reaches every target, so a
	// sandbox that cannot is stopped by berth, not by a broken setup.
	all := map[string]string{"fc00::/7": s.ula}
	for k, v := range s.targets {
		all[k] = v
	}
	for name, a := range all {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(a, strconv.Itoa(s.port)), 3*time.Second)
		if err != nil {
			t.Fatalf("setup: the host cannot reach the %s listener %s: %v", name, a, err)
		}
		c.Close()
	}
	return s
}

// listenIn opens a TCP listener inside a named netns ("" = the host's) that
// accepts and closes connections until the test ends.
func listenIn(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	var err error
	if ns == "" {
		l, err = net.Listen("tcp", addr)
	} else {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // the thread is discarded: it never unlocks
			h, herr := netns.GetFromName(ns)
			if herr != nil {
				err = herr
				return
			}
			defer h.Close()
			if err = netns.Set(h); err != nil {
				return
			}
			l, err = net.Listen("tcp", addr)
		}()
		<-done
	}
	if err != nil {
		t.Fatalf("listen %s in %q: %v", addr, ns, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(banner + "\n"))
			c.Close()
		}
	}()
	return l
}

// banner is what every listener of the suite says first: the probe counts
// a target as reached only when it reads it (or another answer).
const banner = "berth-adv-listener"

// reached reports whether a probe connect result got an answer.
func reached(v string) bool { return strings.HasPrefix(v, "OK:") }

// udpEchoIn runs UDP echo servers inside a netns, one bound to each
// address (so replies come from the address asked), all on one port, and
// returns the port.
func udpEchoIn(t *testing.T, ns string, addrs []string) int {
	t.Helper()
	var pcs []net.PacketConn
	var err error
	port := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // the thread is discarded: it never unlocks
		h, herr := netns.GetFromName(ns)
		if herr != nil {
			err = herr
			return
		}
		defer h.Close()
		if err = netns.Set(h); err != nil {
			return
		}
		for _, a := range addrs {
			var pc net.PacketConn
			if pc, err = net.ListenPacket("udp", net.JoinHostPort(a, strconv.Itoa(port))); err != nil {
				return
			}
			port = pc.LocalAddr().(*net.UDPAddr).Port
			pcs = append(pcs, pc)
		}
	}()
	<-done
	for _, pc := range pcs {
		pc := pc
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 1500)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo(buf[:n], from)
			}
		}()
	}
	if err != nil {
		t.Fatalf("udp listen in %s: %v", ns, err)
	}
	return port
}

// udpTargets are the side-net ranges on the UDP echo port.
func udpTargets(s *sideNet) []string {
	var out []string
	for _, a := range s.targets {
		out = append(out, net.JoinHostPort(a, strconv.Itoa(s.udpPort)))
	}
	return out
}

// Two walls stand between a sandbox and forbidden addresses: the nftables
// rules (network package) and, for TCP, the transparent egress proxy's
// blocklist (egress package), which every sandbox connection passes
// through. The negative controls lift both.
var (
	egressOff  = weaken.Egress + "," + weaken.EgressBlocklist
	isolateOff = weaken.SandboxIsolate + "," + weaken.EgressBlocklist
)

// gateway is the sandbox's default gateway: the bridge's address.
func gateway() string { return "10.22" + advDigit() + ".0.1" }

// egressTargets lists what the probe dials: every side-net range, the
// same through an IPv4-mapped IPv6 address, the host on the gateway and on
// its other address, an IPv6 ULA in the side net and a link-local address
// on the sandbox's own link.
func egressTargets(s *sideNet, hostPort int) map[string]string {
	p := strconv.Itoa(s.port)
	m := map[string]string{}
	for name, a := range s.targets {
		m[name] = net.JoinHostPort(a, p)
	}
	m["::ffff:10/8"] = net.JoinHostPort("::ffff:"+s.targets["10/8"], p)
	m["host gateway"] = net.JoinHostPort(gateway(), strconv.Itoa(hostPort))
	m["host other address"] = net.JoinHostPort(s.hostIP, strconv.Itoa(hostPort))
	m["fc00::/7"] = net.JoinHostPort(s.ula, p)
	m["fe80::/10"] = "[fe80::1%eth0]:" + p
	return m
}

func dialAll(t *testing.T, name, user string, targets map[string]string) map[string]string {
	t.Helper()
	var args []string
	for _, a := range targets {
		args = append(args, a)
	}
	var r map[string]string
	probe(t, name, user, &r, append([]string{"connect"}, args...)...)
	out := map[string]string{}
	for k, a := range targets {
		out[k] = r[a]
	}
	return out
}

// TestEgressPrivateRanges: a sandbox with internet on still reaches no
// private, CGNAT, link-local (metadata) address over TCP or UDP, no host
// address and no IPv6 ULA/link-local one (checklist #24, #25's UDP). Negative control: with egress
// filtering off the same probe reaches the side net and the host.
func TestEgressPrivateRanges(t *testing.T) {
	s := newSideNet(t)
	hostL := listenIn(t, "", gateway()+":0")
	hostPort := hostL.Addr().(*net.TCPAddr).Port
	listenIn(t, "", net.JoinHostPort(s.hostIP, strconv.Itoa(hostPort)))
	targets := egressTargets(s, hostPort)
	on := true
	sandbox(t, api.CreateSandboxRequest{Name: "adv-egress", Internet: &on})
	for _, user := range []string{"root", "user"} {
		r := dialAll(t, "adv-egress", user, targets)
		for k, v := range r {
			if reached(v) || v == "" {
				t.Errorf("as %s: %s (%s): %q", user, k, targets[k], v)
			}
		}
		t.Logf("as %s: %v", user, r)
		var u map[string]string
		probe(t, "adv-egress", user, &u, append([]string{"udp"}, udpTargets(s)...)...)
		for a, v := range u {
			if v == "OK" {
				t.Errorf("as %s: UDP echo from %s", user, a)
			}
		}
	}
	t.Run("negative/"+egressOff, func(t *testing.T) {
		withWeakened(t, egressOff, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-egress-weak", Internet: &on})
			var u map[string]string
			probe(t, "adv-egress-weak", "root", &u, append([]string{"udp"}, udpTargets(s)...)...)
			for a, v := range u {
				if v != "OK" {
					t.Errorf("with egress filtering off, UDP to %s: %s", a, v)
				}
			}
			r := dialAll(t, "adv-egress-weak", "root", targets)
			for _, k := range []string{"10/8", "172.16/12", "192.168/16", "100.64/10", "169.254/16", "host gateway", "host other address"} {
				if r[k] != "OK:"+banner {
					t.Errorf("with egress filtering off, %s still unreachable: %s", k, r[k])
				}
			}
			t.Logf("with egress off: %v", r)
		})
	})
}

// TestSandboxToSandbox: one sandbox cannot connect to a server in another,
// even with internet on for both (checklist #24). Negative control: with
// sandbox isolation off it can.
func TestSandboxToSandbox(t *testing.T) {
	check := func(t *testing.T, suffix string) string {
		on := true
		sandbox(t, api.CreateSandboxRequest{Name: "adv-s2s-a" + suffix, Internet: &on})
		b := sandbox(t, api.CreateSandboxRequest{Name: "adv-s2s-b" + suffix, Internet: &on})
		ctx := context.Background()
		p, err := d.c.StartProcess(ctx, b.Name, api.StartProcessRequest{Command: "python3 -m http.server 8080 --bind 0.0.0.0"})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := d.c.WaitForPort(ctx, b.Name, p.ID, api.WaitPortRequest{Port: 8080, TimeoutMs: 30000}); err != nil {
			t.Fatalf("server in %s: %+v %v", b.Name, r, err)
		}
		var self map[string]string
		probe(t, b.Name, "user", &self, "connect", "127.0.0.1:8080")
		if !reached(self["127.0.0.1:8080"]) {
			t.Fatalf("setup: %s cannot reach its own server: %v", b.Name, self)
		}
		var r map[string]string
		probe(t, "adv-s2s-a"+suffix, "root", &r, "connect", b.IP+":8080")
		return r[b.IP+":8080"]
	}
	if r := check(t, ""); reached(r) || r == "" {
		t.Fatalf("sandbox reached another sandbox's server: %q", r)
	} else {
		t.Logf("blocked: %s", r)
	}
	t.Run("negative/"+isolateOff, func(t *testing.T) {
		withWeakened(t, isolateOff, func() {
			if r := check(t, "-weak"); !reached(r) {
				t.Fatalf("with sandbox isolation off the probe still could not connect: %s", r)
			}
		})
	})
}

// TestControlPlaneUnreachable: from a sandbox, the daemon's API and preview
// ports are unreachable on every host address, including the sandbox's own
// 127.0.0.1, and no host unix socket can be connected to (checklist #26).
// Negative control: with egress filtering off, a host service listening on
// the gateway (as a daemon bound to all addresses would be) is reached.
func TestControlPlaneUnreachable(t *testing.T) {
	_, port, _ := net.SplitHostPort(d.listen)
	on := true
	sandbox(t, api.CreateSandboxRequest{Name: "adv-cp", Internet: &on})
	targets := []string{gateway() + ":" + port, "127.0.0.1:" + port}
	for _, user := range []string{"root", "user"} {
		var r map[string]string
		probe(t, "adv-cp", user, &r, append([]string{"connect"}, targets...)...)
		for _, a := range targets {
			if reached(r[a]) || r[a] == "" {
				t.Errorf("as %s: daemon API reachable at %s (%q)", user, a, r[a])
			}
		}
		var u struct {
			Sockets map[string]string `json:"sockets"`
		}
		probe(t, "adv-cp", user, &u, "unixscan")
		for sock, res := range u.Sockets {
			// The agent's own sockets are served by PID 1 inside the
			// sandbox (exec channel, sudo broker), not by the host.
			inSandbox := strings.HasPrefix(sock, "/.berth/") || strings.HasPrefix(sock, "/run/berth-agent") || sock == "/dev/berth-sudo.sock"
			if res == "OK" && !inSandbox {
				t.Errorf("as %s: unix socket %s connectable", user, sock)
			}
		}
		t.Logf("as %s: tcp %v unix %v", user, r, u.Sockets)
	}
	t.Run("negative/"+egressOff, func(t *testing.T) {
		hostL := listenIn(t, "", gateway()+":0")
		withWeakened(t, egressOff, func() {
			sandbox(t, api.CreateSandboxRequest{Name: "adv-cp-weak", Internet: &on})
			var r map[string]string
			a := hostL.Addr().String()
			probe(t, "adv-cp-weak", "root", &r, "connect", a)
			if r[a] != "OK:"+banner {
				t.Fatalf("with egress filtering off a host service on the gateway is still unreachable: %v", r)
			}
		})
	})
}
