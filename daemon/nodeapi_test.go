package daemon

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/nodetest"
	"github.com/berth-sh/berth/node/remote"
	"github.com/berth-sh/berth/server"
)

func TestNodeAPICheck(t *testing.T) {
	for _, c := range []struct {
		conf NodeAPIConfig
		want string // "" = accepted; else a part of the error
	}{
		{NodeAPIConfig{}, ""},
		{NodeAPIConfig{Listen: "127.0.0.1:7443"}, ""},
		{NodeAPIConfig{Listen: "[::1]:7443"}, ""},
		{NodeAPIConfig{Listen: "localhost:7443"}, ""},
		{NodeAPIConfig{Listen: "10.0.0.5:7443"}, "--node-insecure"},
		{NodeAPIConfig{Listen: ":7443"}, "not a loopback address"},
		{NodeAPIConfig{Listen: "0.0.0.0:7443"}, "not a loopback address"},
		{NodeAPIConfig{Listen: "node1.example:7443"}, "not a loopback address"},
		{NodeAPIConfig{Listen: "10.0.0.5:7443", Insecure: true}, ""},
		{NodeAPIConfig{Listen: "10.0.0.5:7443", TLSCert: "c", TLSKey: "k"}, ""},
		{NodeAPIConfig{Listen: "10.0.0.5:7443", TLSCert: "c"}, "go together"},
		{NodeAPIConfig{TLSKey: "k"}, "go together"},
		{NodeAPIConfig{Listen: "7443"}, "host:port"},
	} {
		err := c.conf.check()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.conf, err, c.want)
		}
	}
	// Run refuses it before anything starts (defaults runs first).
	cfg := Config{Node: NodeAPIConfig{Listen: "0.0.0.0:7443"}}
	if err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "--node-tls-cert") {
		t.Errorf("Run with a plain node API on every interface: %v", err)
	}
}

func TestClusterToken(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, clusterTokenFile)
	// A crash's leftover temp file, readable by all, does not lend the
	// new token its mode.
	if err := os.WriteFile(p+".tmp", []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := loadOrCreateClusterToken(p, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^bct_[0-9a-f]{64}$`).MatchString(tok) {
		t.Fatalf("new token %q is not bct_ + 64 hex", tok)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v; want 0600", err, st.Mode())
	}
	if again, err := loadOrCreateClusterToken(p, t.Logf); err != nil || again != tok {
		t.Fatalf("reload: %q %v", again, err)
	}
	if got, err := readClusterToken(p); err != nil || got != tok {
		t.Fatalf("client read: %q %v", got, err)
	}
	// An operator's token (shared by the cluster) is kept as it is; a
	// short one is an error, never silently replaced.
	mine := strings.Repeat("x", 40)
	os.WriteFile(p, []byte(mine+"\n"), 0o600)
	if got, err := loadOrCreateClusterToken(p, t.Logf); err != nil || got != mine {
		t.Fatalf("operator's token: %q %v", got, err)
	}
	os.WriteFile(p, []byte("short\n"), 0o600)
	if _, err := loadOrCreateClusterToken(p, t.Logf); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("short token: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "short\n" {
		t.Fatalf("short token file replaced by %q", b)
	}
	// A token others can read is used, with a warning.
	os.WriteFile(p, []byte(mine), 0o644)
	os.Chmod(p, 0o644)
	var warned string
	if _, err := loadOrCreateClusterToken(p, func(f string, a ...any) { warned = fmt.Sprintf(f, a...) }); err != nil || !strings.Contains(warned, "chmod 600") {
		t.Fatalf("readable token: %v, warning %q", err, warned)
	}
	if strings.Contains(warned, mine) {
		t.Fatal("the warning shows the token")
	}
	// A client never makes one up.
	if _, err := readClusterToken(filepath.Join(dir, "none")); err == nil {
		t.Fatal("client read a token that does not exist")
	}
}

// certFiles writes a self-signed certificate for 127.0.0.1 and its key.
func certFiles(t *testing.T) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "berth node test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, key
}

// startNodeServer serves n as Run does and returns the config a client
// of it uses.
func startNodeServer(t *testing.T, c NodeAPIConfig, n node.Node, limits server.ConnLimits) (*nodeServer, Config) {
	t.Helper()
	dir := t.TempDir()
	token, err := loadOrCreateClusterToken(c.tokenPath(dir), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newNodeServer(c, n, token, nil, limits, server.GuardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go s.serve()
	t.Cleanup(func() { s.srv.Close() })
	return s, Config{DataDir: dir, Node: c}
}

func fakeNode(t *testing.T) *nodetest.Fake {
	f := nodetest.NewFake(t, nil)
	f.ExecFunc = func(_ context.Context, _ string, argv []string, _ node.ExecOptions) (node.Process, error) {
		return nodetest.Done(0, strings.Join(argv, " ")+"\n"), nil
	}
	return f
}

// The node API over TLS: a client that trusts the node's CA runs calls
// through it; one that does not (the system's roots) is refused at the
// handshake, and a plain-HTTP client gets no answer from the TLS port.
func TestNodeAPITLS(t *testing.T) {
	cert, key := certFiles(t)
	fake := fakeNode(t)
	s, cfg := startNodeServer(t, NodeAPIConfig{Listen: "127.0.0.1:0", TLSCert: cert, TLSKey: key}, fake, server.ConnLimits{})
	if !strings.HasPrefix(s.url, "https://127.0.0.1:") {
		t.Fatalf("node API URL %s", s.url)
	}
	ctx := context.Background()
	cfg.Node.CA = cert
	c, err := cfg.NodeClient(s.url)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, "sb", node.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := c.Exec(ctx, "sb", []string{"echo", "over", "tls"}, node.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p.Stdout())
	if code, err := p.Wait(ctx); code != 0 || err != nil || string(out) != "echo over tls\n" {
		t.Fatalf("exec over TLS: %d %v %q", code, err, out)
	}

	cfg.Node.CA = ""
	untrusting, err := cfg.NodeClient(s.url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untrusting.Info(ctx); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("client without the node's CA: %v, want a certificate error", err)
	}
	plain := strings.Replace(s.url, "https://", "http://", 1)
	cfg.Node.Insecure = true
	pc, err := cfg.NodeClient(plain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Info(ctx); err == nil {
		t.Error("plain HTTP to the TLS node API answered")
	}
	if _, err := newNodeServer(NodeAPIConfig{Listen: "127.0.0.1:0", TLSCert: cert, TLSKey: cert}, fake, "x", nil, server.ConnLimits{}, server.GuardOptions{}); err == nil {
		t.Error("a certificate as its own key was accepted")
	}
}

func TestNodeClientRefusesCleartextBeyondLoopback(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadOrCreateClusterToken(filepath.Join(dir, clusterTokenFile), nil); err != nil {
		t.Fatal(err)
	}
	cfg := Config{DataDir: dir}
	for _, u := range []string{"http://10.0.0.5:7443", "http://node1.example:7443", "http://[2001:db8::1]:7443"} {
		if _, err := cfg.NodeClient(u); err == nil || !strings.Contains(err.Error(), "--node-insecure") {
			t.Errorf("NodeClient(%s): %v, want a refusal naming --node-insecure", u, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:7443", "http://localhost:7443", "http://[::1]:7443", "https://10.0.0.5:7443"} {
		if _, err := cfg.NodeClient(u); err != nil {
			t.Errorf("NodeClient(%s): %v", u, err)
		}
	}
	cfg.Node.Insecure = true
	if _, err := cfg.NodeClient("http://10.0.0.5:7443"); err != nil {
		t.Errorf("NodeClient with --node-insecure: %v", err)
	}
	if _, err := cfg.NodeClient("ftp://10.0.0.5"); err == nil {
		t.Error("ftp URL accepted")
	}
	cfg.Node.CA = filepath.Join(dir, clusterTokenFile) // no PEM in it
	if _, err := cfg.NodeClient("https://10.0.0.5:7443"); err == nil || !strings.Contains(err.Error(), "no PEM") {
		t.Errorf("CA file without a certificate: %v", err)
	}
}

// The node listener has the user API's guards: its server's timeouts and
// header cap, and the connection caps.
func TestNodeAPIGuards(t *testing.T) {
	s, cfg := startNodeServer(t, NodeAPIConfig{Listen: "127.0.0.1:0"}, fakeNode(t), server.ConnLimits{MaxConnsPerIP: 1})
	ref := server.NewHTTPServer("", nil)
	if s.srv.ReadHeaderTimeout != ref.ReadHeaderTimeout || s.srv.MaxHeaderBytes != ref.MaxHeaderBytes || s.srv.IdleTimeout != ref.IdleTimeout || ref.ReadHeaderTimeout == 0 {
		t.Errorf("node server timeouts %v/%d/%v, want the user API's %v/%d/%v", s.srv.ReadHeaderTimeout, s.srv.MaxHeaderBytes, s.srv.IdleTimeout,
			ref.ReadHeaderTimeout, ref.MaxHeaderBytes, ref.IdleTimeout)
	}
	addr := strings.TrimPrefix(s.url, "http://")
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The first connection is held open (its request not sent); the
	// second from the same address is over the cap of one.
	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(second), nil)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second connection over a cap of one: %v %v, want 429", resp, err)
	}
	// The node API itself answers on the first, with the token.
	c, err := cfg.NodeClient(s.url)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	waitUntil(t, func() bool { _, err := c.Info(context.Background()); return err == nil })
}

func waitUntil(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("condition not met in 10s")
}

// The node API's credential is the cluster token only: no token, a wrong
// one or a user API key is 401, and the user API's routes do not exist
// on the node port.
func TestNodeAPIAuth(t *testing.T) {
	s, cfg := startNodeServer(t, NodeAPIConfig{Listen: "127.0.0.1:0"}, fakeNode(t), server.ConnLimits{})
	token, err := readClusterToken(cfg.Node.tokenPath(cfg.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	apiKey, err := loadOrCreateKey(filepath.Join(cfg.DataDir, "api-key"))
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, auth string) int {
		req, _ := http.NewRequest("GET", s.url+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	info := remote.Prefix + "/info"
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{info, "", 401},
		{info, "Bearer wrong-" + token, 401},
		{info, "Bearer " + apiKey, 401},
		{info, "Bearer " + token, 200},
		{"/v1/sandboxes", "Bearer " + token, 404},
		{"/v1/sandboxes", "Bearer " + apiKey, 401},
	} {
		if got := get(c.path, c.auth); got != c.want {
			t.Errorf("GET %s with %q: %d, want %d", c.path, strings.Replace(strings.Replace(c.auth, token, "<cluster token>", 1), apiKey, "<api key>", 1), got, c.want)
		}
	}
}
