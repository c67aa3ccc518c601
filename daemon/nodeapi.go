package daemon

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/remote"
	"github.com/berth-sh/berth/server"
)

// The node API serves this machine's node (node.Node, over node/remote's
// protocol) to other berth processes: a control plane elsewhere places
// sandboxes here and runs them through it. It grants the whole node, so it
// has its own credential, the cluster token, which is not the user API
// key: a user key never opens the node API, and the cluster token never
// opens the user API. It is off unless --node-listen is given.

// clusterTokenFile is the default name of the cluster credential's file in
// the data dir.
const clusterTokenFile = "cluster-token"

// minClusterToken is the shortest cluster token accepted from a file an
// operator wrote (one this daemon makes is 68 characters).
const minClusterToken = 32

// tokenPath is the cluster token's file: TokenFile, or <data>/cluster-token.
func (c NodeAPIConfig) tokenPath(dataDir string) string {
	if c.TokenFile != "" {
		return c.TokenFile
	}
	if dataDir == "" {
		dataDir = "/var/lib/berth"
	}
	return filepath.Join(dataDir, clusterTokenFile)
}

// check refuses, at start, a node API configuration that would send the
// cluster credential in the clear to or from another machine.
func (c NodeAPIConfig) check() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--node-tls-cert and --node-tls-key go together: give both or neither")
	}
	if c.Listen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("--node-listen %q: want host:port: %w", c.Listen, err)
	}
	if c.TLSCert == "" && !c.Insecure && !isLoopbackHost(host) {
		return fmt.Errorf("--node-listen %s is not a loopback address and the node API has no TLS: "+
			"its cluster credential (which grants the whole node) would cross the network in the clear; "+
			"give --node-tls-cert and --node-tls-key, or --node-insecure if the network is trusted or TLS ends in front of berth", c.Listen)
	}
	return nil
}

// isLoopbackHost reports whether host (an address's host part) names only
// the loopback interface; "" and unspecified addresses mean every
// interface and are not.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// loadOrCreateClusterToken returns the cluster token in path, creating a
// new random one (mode 0600) when the file does not exist. A file that
// exists is never replaced: the token is shared with the other members of
// the cluster, so a short or empty one is an error to fix, not a reason
// to make a new one.
func loadOrCreateClusterToken(path string, logf func(string, ...any)) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		var r [32]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		tok := "bct_" + hex.EncodeToString(r[:])
		if err := writeFileAtomic(path, []byte(tok+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("create the cluster token: %w", err)
		}
		return tok, nil
	}
	if err != nil {
		return "", fmt.Errorf("read the cluster token: %w", err)
	}
	tok, err := parseClusterToken(path, b)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 && logf != nil {
		logf("WARNING: the cluster token file %s has mode %04o: others on this host can read a credential that grants the whole node; chmod 600 it", path, st.Mode().Perm())
	}
	return tok, nil
}

// readClusterToken reads the cluster token a client presents; it must
// exist (a client never makes one up).
func readClusterToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the cluster token: %w", err)
	}
	return parseClusterToken(path, b)
}

func parseClusterToken(path string, b []byte) (string, error) {
	tok := strings.TrimSpace(string(b))
	if len(tok) < minClusterToken {
		return "", fmt.Errorf("the cluster token in %s has %d characters; want at least %d (remove the file to have one made)", path, len(tok), minClusterToken)
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("the cluster token in %s holds white space; want one line", path)
	}
	return tok, nil
}

// nodeTLS is the node API's server TLS configuration, nil without a
// certificate. HTTP/1.1 only: an agent tunnel is an HTTP/1.1 Upgrade.
func nodeTLS(c NodeAPIConfig) (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("--node-tls-cert/--node-tls-key: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}}, nil
}

// nodeServer is the node API's listener and server.
type nodeServer struct {
	srv *http.Server
	ln  net.Listener
	url string
}

// newNodeServer listens on c.Listen and serves n with token. It has the
// user API's HTTP guards: header timeout and size cap, idle timeout, the
// connection caps (its own counts, as the preview listener has), bounded
// request bodies and one log line per request (no header, so no token).
//
// recv, when not nil, is the cluster's forwarding receiver (package
// control/forward): requests under forward.Prefix go to it, and the rest
// to the node API.
func newNodeServer(c NodeAPIConfig, n node.Node, token string, recv http.Handler, limits server.ConnLimits, g server.GuardOptions) (*nodeServer, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	tlsConf, err := nodeTLS(c)
	if err != nil {
		return nil, err
	}
	g.LongLived = nodeLongLived
	g.KeepForwardHeaders = true // the receiver checks the cluster credential first
	var h http.Handler = remote.NewHandler(n, token)
	if recv != nil {
		h = forward.Mount(h, recv)
	}
	srv := server.NewHTTPServer("", server.Guard(h, g))
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.TLSConfig = tlsConf
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("node API listener: %w", err)
	}
	s := &nodeServer{srv: srv, ln: server.LimitListener(ln, limits), url: "http://" + ln.Addr().String()}
	if tlsConf != nil {
		// The caps count raw connections, before their handshake.
		s.ln = tls.NewListener(s.ln, tlsConf)
		s.url = "https://" + ln.Addr().String()
	}
	return s, nil
}

func (s *nodeServer) serve() error { return s.srv.Serve(s.ln) }

// nodeLongLived: an exec's body carries its stdin (up to 80 MiB), so it
// gets the per-pause bound; so does every forwarded request (an upload, a
// stream, a WebSocket), whose own bounds the API stack it is handed to
// applies by its original route. Every other node request body is small
// JSON and gets the whole-body one.
func nodeLongLived(r *http.Request) bool {
	if r.URL.Path == forward.Prefix || strings.HasPrefix(r.URL.Path, forward.Prefix+"/") {
		return true
	}
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/exec")
}

// NodeClient returns a client of the node API served at baseURL
// ("https://host:port"), with this daemon's cluster token (the file must
// exist). Over https it verifies the node's certificate against the CA
// file (the system's roots without one); plain http is refused to a host
// that is not loopback unless Insecure.
func (c Config) NodeClient(baseURL string) (*remote.Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("node URL %q: want http(s)://host:port", baseURL)
	}
	tr := &http.Transport{
		Proxy:                 nil, // node traffic is never proxied
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute, // a Start pulls and unpacks
		DisableCompression:    true,
	}
	switch u.Scheme {
	case "https":
		conf, err := c.Node.clientTLS()
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = conf
	case "http":
		if !c.Node.Insecure && !isLoopbackHost(u.Hostname()) {
			return nil, fmt.Errorf("node URL %s is plain http to a host that is not loopback: the cluster credential would cross the network in the clear; use https (with --node-ca for a private CA), or --node-insecure", baseURL)
		}
	default:
		return nil, fmt.Errorf("node URL %q: want http or https", baseURL)
	}
	token, err := readClusterToken(c.Node.tokenPath(c.DataDir))
	if err != nil {
		return nil, err
	}
	return remote.NewClient(baseURL, token, &http.Client{Transport: tr}), nil
}

// clientTLS is the TLS configuration this process calls other nodes' node
// APIs with: TLS 1.3, HTTP/1.1 (an agent tunnel and a forwarded WebSocket
// are HTTP/1.1 Upgrades), roots from --node-ca or the system's.
func (c NodeAPIConfig) clientTLS() (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}}
	if c.CA != "" {
		pem, err := os.ReadFile(c.CA)
		if err != nil {
			return nil, fmt.Errorf("--node-ca: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--node-ca %s holds no PEM certificate", c.CA)
		}
	}
	return conf, nil
}
