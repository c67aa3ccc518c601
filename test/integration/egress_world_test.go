//go:build integration

package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"github.com/berth-sh/berth/client"
)

// The egress tests run berth in a network namespace of their own (egHost),
// beside a fake internet (egInet) that holds every upstream: nothing they
// do can send a packet off this machine. egHost reaches egInet through a
// veth (192.0.2.1 ↔ 192.0.2.2) and routes everything there; egInet holds
// the "public" and the forbidden addresses on its loopback.
var (
	egHost   = "bxe" + itIDDigit() + "h"
	egInet   = "bxe" + itIDDigit() + "i"
	egBridge = "berthe" + itIDDigit()
	egSubnet = "10.18" + itIDDigit() + ".0.0/16"
	egRunDir = "/run/berth-it" + itID + "e"
)

const (
	egHostAddr  = "192.0.2.1" // berth's host, seen from its sandboxes' side of the world
	egAPI       = "203.0.113.10"
	egOther     = "203.0.113.20"
	egDNS       = "203.0.113.53"
	egControl   = "203.0.113.99" // negative-control listener (port 8080)
	egMetadata  = "169.254.169.254"
	egPrivate   = "10.98.0.5" // private, never opened
	egOpened    = "10.99.0.5" // private, opened by --egress-open-private
	egHostPort  = "8081"      // listener on berth's host (all addresses)
	egOpenRange = "10.99.0.0/24"
)

func nsPath(name string) string { return "/run/netns/" + name }

// inNetNS runs fn on a thread that is inside the named netns; sockets fn
// creates stay there.
func inNetNS(name string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	ns, err := netns.GetFromPath(nsPath(name))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err == nil {
		runtime.UnlockOSThread() // a thread that could not go back stays locked and dies with the goroutine
	}
	return ferr
}

func mustSh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// egWorld is the fake internet and what its servers saw.
type egWorld struct {
	caFile  string
	caPool  *x509.CertPool
	caPEM   []byte
	secret  string
	rebinds atomic.Int64
	udpSeen atomic.Int64 // datagrams the UDP listener (egControl:9999) got

	mu   sync.Mutex
	auth []string // Authorization headers api.internal.test received
}

func (w *egWorld) authSeen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.auth...)
}

func newTestCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egress test internet CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func leafFor(ca *x509.Certificate, caKey *ecdsa.PrivateKey) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var mu sync.Mutex
	cache := map[string]*tls.Certificate{}
	return func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		name := h.ServerName
		if c := cache[name]; c != nil {
			return c, nil
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
			DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if ip := net.ParseIP(name); ip != nil || name == "" {
			tmpl.DNSNames, tmpl.IPAddresses = nil, []net.IP{net.ParseIP(egOther), net.ParseIP(egAPI)}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
		cache[name] = c
		return c, nil
	}
}

// setupEgressWorld creates both namespaces, the veth between them and
// every upstream server; cleanup removes them.
func setupEgressWorld(t *testing.T) *egWorld {
	for _, ns := range []string{egHost, egInet} {
		_ = exec.Command("ip", "netns", "del", ns).Run() // leftovers of a killed run
		mustSh(t, "ip", "netns", "add", ns)
		ns := ns
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	va, vb := "bxe"+itIDDigit()+"a", "bxe"+itIDDigit()+"b"
	mustSh(t, "ip", "link", "add", va, "netns", egHost, "type", "veth", "peer", "name", vb, "netns", egInet)
	mustSh(t, "ip", "-n", egHost, "addr", "add", egHostAddr+"/30", "dev", va)
	mustSh(t, "ip", "-n", egInet, "addr", "add", "192.0.2.2/30", "dev", vb)
	for _, ns := range [][]string{{egHost, va}, {egInet, vb}} {
		mustSh(t, "ip", "-n", ns[0], "link", "set", "lo", "up")
		mustSh(t, "ip", "-n", ns[0], "link", "set", ns[1], "up")
	}
	mustSh(t, "ip", "-n", egHost, "route", "add", "default", "via", "192.0.2.2")
	for _, a := range []string{egAPI, egOther, egDNS, egControl, egMetadata, egPrivate, egOpened} {
		mustSh(t, "ip", "-n", egInet, "addr", "add", a+"/32", "dev", "lo")
	}

	w := &egWorld{secret: fmt.Sprintf("s3cr3t-gh-%d", time.Now().UnixNano())}
	ca, caKey, caPEM := newTestCA(t)
	w.caPEM = caPEM
	w.caPool = x509.NewCertPool()
	w.caPool.AddCert(ca)
	w.caFile = filepath.Join(t.TempDir(), "internet-ca.pem")
	if err := os.WriteFile(w.caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	repo := makeBareRepo(t)
	echo := func(name string) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			got := r.Header.Get("Authorization")
			if name == "api" {
				w.mu.Lock()
				w.auth = append(w.auth, got)
				w.mu.Unlock()
			}
			// The value is never echoed: the sandbox must not learn it.
			auth := "none"
			if got == "Bearer "+w.secret {
				auth = "match"
			} else if got != "" {
				auth = "other"
			}
			if name == "api" && len(r.URL.Path) > 10 && r.URL.Path[:10] == "/repo.git/" {
				if auth != "match" {
					http.Error(rw, "credentials required", http.StatusUnauthorized)
					return
				}
				http.StripPrefix("/repo.git/", http.FileServer(http.Dir(repo))).ServeHTTP(rw, r)
				return
			}
			fmt.Fprintf(rw, "server=%s host=%s auth=%s\n", name, r.Host, auth)
		})
	}
	getCert := leafFor(ca, caKey)
	serve := func(ns, addr, name string, useTLS bool) {
		var ln net.Listener
		if err := inNetNS(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return }); err != nil {
			t.Fatalf("listen %s in %s: %v", addr, ns, err)
		}
		t.Cleanup(func() { ln.Close() })
		srv := &http.Server{Handler: echo(name), ReadHeaderTimeout: 10 * time.Second}
		if useTLS {
			srv.TLSConfig = &tls.Config{GetCertificate: getCert}
			go srv.ServeTLS(ln, "", "")
		} else {
			go srv.Serve(ln)
		}
	}
	serve(egInet, egAPI+":443", "api", true)
	serve(egInet, egAPI+":80", "api", false)
	serve(egInet, egOther+":443", "other", true)
	serve(egInet, egOther+":80", "other", false)
	serve(egInet, egControl+":8080", "control", false)
	serve(egInet, egMetadata+":80", "metadata", false)
	serve(egInet, egPrivate+":80", "private", false)
	serve(egInet, egOpened+":80", "opened", false)
	serve(egHost, ":"+egHostPort, "host", false)
	serve(egHost, "127.0.0.1:80", "loopback", false)

	var upc net.PacketConn
	if err := inNetNS(egInet, func() (err error) { upc, err = net.ListenPacket("udp", egControl+":9999"); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { upc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := upc.ReadFrom(buf); err != nil {
				return
			}
			w.udpSeen.Add(1)
		}
	}()

	names := map[string]string{"api.internal.test.": egAPI, "pkg.internal.test.": egAPI, "other.test.": egOther,
		"opened.test.": egOpened, "private.test.": egPrivate, "control.test.": egControl}
	h := dns.HandlerFunc(func(rw dns.ResponseWriter, q *dns.Msg) {
		r := new(dns.Msg)
		r.SetReply(q)
		qn := q.Question[0]
		ip := names[qn.Name]
		if qn.Name == "rebind.test." && qn.Qtype == dns.TypeA {
			// Public once, then the private address: a rebinding attack.
			ip = egPrivate
			if w.rebinds.Add(1) == 1 {
				ip = egAPI
			}
		}
		switch {
		case ip == "" && qn.Name != "rebind.test.":
			r.Rcode = dns.RcodeNameError
		case qn.Qtype == dns.TypeA:
			r.Answer = append(r.Answer, &dns.A{Hdr: dns.RR_Header{Name: qn.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.ParseIP(ip)})
		}
		_ = rw.WriteMsg(r)
	})
	var pc net.PacketConn
	var tl net.Listener
	if err := inNetNS(egInet, func() (err error) {
		if pc, err = net.ListenPacket("udp", egDNS+":53"); err != nil {
			return err
		}
		tl, err = net.Listen("tcp", egDNS+":53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	us, ts := &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: tl, Handler: h}
	go us.ActivateAndServe()
	go ts.ActivateAndServe()
	t.Cleanup(func() { us.Shutdown(); ts.Shutdown() })
	return w
}

// makeBareRepo builds a repository served over "dumb" HTTP.
func makeBareRepo(t *testing.T) string {
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "repo.git")
	git := func(d string, args ...string) {
		cmd := exec.Command("git", append([]string{"-C", d, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.MkdirAll(work, 0o755)
	git(work, "init", "-q")
	os.WriteFile(filepath.Join(work, "README"), []byte("hello from repo\n"), 0o644)
	git(work, "add", "README")
	git(work, "commit", "-qm", "first")
	git(dir, "clone", "-q", "--bare", work, bare)
	git(bare, "update-server-info")
	return bare
}

// egDaemon is a berth serve running inside egHost.
type egDaemon struct {
	cmd  *exec.Cmd
	c    *client.Client
	key  string
	data string
	log  *os.File
}

const egListen = "127.0.0.1:7070" // egHost's own loopback

// startEgressDaemon starts berth serve in egHost with the suite's base
// image (hard links to the main data dir's image store). It enters only the
// network namespace (nsenter --net): `ip netns exec` would also mount a
// fresh /sys, hiding /sys/fs/cgroup from the daemon and runc.
func startEgressDaemon(t *testing.T, w *egWorld, weak string) *egDaemon {
	return startEgressDaemonOpts(t, w, weak, true)
}

// startEgressDaemonOpts with fresh false keeps the image links and the
// sandboxes a previous daemon left running (a restart).
func startEgressDaemonOpts(t *testing.T, w *egWorld, weak string, fresh bool) *egDaemon {
	t.Helper()
	data := dataDir + "-egress"
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if weak == "" && fresh {
		// Fresh links each run, so the image is the suite's current one.
		_ = os.RemoveAll(filepath.Join(data, "images"))
		mustSh(t, "cp", "-al", filepath.Join(dataDir, "images"), filepath.Join(data, "images"))
		mustSh(t, "cp", "--remove-destination", filepath.Join(dataDir, "images", "index.json"), filepath.Join(data, "images", "index.json"))
	}
	logf, err := os.OpenFile(filepath.Join(os.TempDir(), "berth-it"+itID+"-egress-daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net="+nsPath(egHost), "--", filepath.Join(binDir, "berth"), "serve",
		"--listen", egListen, "--preview-listen", "127.0.0.1:7080", "--data", data, "--run-dir", egRunDir,
		"--bridge", egBridge, "--subnet", egSubnet, "--alarm-tick", "200ms",
		"--egress-dns-upstream", egDNS+":53", "--egress-open-private", egOpenRange, "--egress-upstream-ca", w.caFile)
	cmd.Env = append(os.Environ(), "BERTH_TEST_WEAKEN="+weak)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &egDaemon{cmd: cmd, data: data, log: logf}
	t.Cleanup(d.stop)
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNetNS(egHost, func() (err error) { c, err = (&net.Dialer{}).DialContext(ctx, network, addr); return })
		return c, err
	}}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var cc struct{ URL, APIKey string }
		b, err := os.ReadFile(filepath.Join(data, "client.json"))
		if err == nil && json.Unmarshal(b, &cc) == nil {
			d.key = cc.APIKey
			d.c = client.New("http://"+egListen, cc.APIKey, client.WithHTTPClient(&http.Client{Transport: tr}))
			if _, err := d.c.Health(context.Background()); err == nil {
				ctx := context.Background()
				if list, err := d.c.List(ctx, "", nil); err == nil && fresh {
					for _, s := range list {
						_ = d.c.Destroy(ctx, s.Name)
					}
				}
				return d
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("egress daemon did not become healthy; see %s", logf.Name())
	return nil
}

func (d *egDaemon) stop() {
	if d.cmd == nil {
		return
	}
	ctx := context.Background()
	if list, err := d.c.List(ctx, "", nil); err == nil {
		for _, s := range list {
			_ = d.c.Destroy(ctx, s.Name)
		}
	}
	d.term()
}

// term stops the daemon and leaves its sandboxes running.
func (d *egDaemon) term() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
	d.cmd = nil
	d.log.Close()
}

// directGet fetches url from inside egHost without berth: the negative
// control showing a listener is there to be reached.
func directGet(t *testing.T, url string) string {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNetNS(egHost, func() (err error) {
			c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			return
		})
		return c, err
	}}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("direct GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// directUDP sends one datagram from inside egHost without berth.
func directUDP(t *testing.T, addr string) {
	t.Helper()
	if err := inNetNS(egHost, func() error {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("x"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
