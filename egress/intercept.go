package egress

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/weaken"
)

// intercept terminates the sandbox's TLS for sni with a certificate from
// the egress CA, adds the injection rule's headers to each request, and
// sends it over a new TLS connection to target, verifying that the server
// really is sni. The sandbox never sees the injected values.
func (m *Manager) intercept(pc *prefixConn, c *countConn, sb *sandbox, sni string, target netip.AddrPort, dec Decision, ev api.EgressEvent) {
	ev.Allowed, ev.Rule, ev.Injected, ev.IP = true, dec.Rule, true, target.Addr().String()
	leaf, err := m.ca.Leaf(sni)
	if err != nil {
		ev.Allowed, ev.Reason = false, "mint certificate: "+err.Error()
		m.record(sb.name, ev)
		return
	}
	tc := tls.Server(pc, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	var once sync.Once
	closeAll := func() { once.Do(func() { tc.Close(); c.Close() }) }
	untrack := sb.track(&conn{host: sni, ip: target.Addr(), port: target.Port(), close: closeAll})
	defer untrack()

	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			to := target
			if h, _, _ := net.SplitHostPort(addr); h != sni {
				// Only reachable with the host-match protection off:
				// the request goes where its Host header says.
				addrs, _, err := m.lookupA(ctx, h)
				if err != nil || len(addrs) == 0 {
					return nil, &net.DNSError{Err: "no address", Name: h}
				}
				to = netip.AddrPortFrom(addrs[0], target.Port())
			}
			d := net.Dialer{Timeout: dialTimeout}
			return d.DialContext(ctx, "tcp", to.String())
		},
		TLSClientConfig:     &tls.Config{RootCAs: m.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	defer tr.CloseIdleConnections()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			host := pr.In.Host
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "https", net.JoinHostPort(NormalizeHost(host), "443"), NormalizeHost(host)
			if hs, ok := pr.In.Context().Value(injectKey{}).([]Header); ok {
				for _, h := range hs {
					pr.Out.Header.Set(h.Name, h.Value)
				}
			}
		},
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			m.record(sb.name, api.EgressEvent{Kind: api.EgressHTTPS, Host: sni, IP: target.Addr().String(), Port: int(target.Port()),
				Allowed: true, Rule: dec.Rule, Injected: true, Reason: "upstream: " + err.Error()})
			http.Error(w, "berth egress: upstream "+sni+": "+err.Error(), http.StatusBadGateway)
		},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := NormalizeHost(r.Host)
		if host != sni && !weaken.Off(weaken.EgressHostMatch) {
			m.record(sb.name, api.EgressEvent{Kind: api.EgressHTTPS, Host: host, Port: int(target.Port()),
				Rule: "host-mismatch", Reason: "Host " + host + " differs from SNI " + sni})
			http.Error(w, "berth egress: Host does not match the TLS server name", http.StatusMisdirectedRequest)
			return
		}
		// Headers are resolved per request, from the policy in force now.
		inj := sb.policy().InjectFor(sni)
		var set []Header
		if inj != nil {
			for _, hd := range inj.Headers {
				v, err := Expand(hd.Value, func(name string) (string, bool) {
					s, ok, err := m.cfg.Secret(r.Context(), name)
					return s, ok && err == nil
				})
				if err != nil {
					m.record(sb.name, api.EgressEvent{Kind: api.EgressHTTPS, Host: sni, Port: int(target.Port()),
						Rule: "inject:" + inj.Host, Reason: err.Error()})
					http.Error(w, "berth egress: "+err.Error(), http.StatusBadGateway)
					return
				}
				set = append(set, Header{hd.Name, v})
			}
		}
		rw := &statusWriter{ResponseWriter: w}
		body := &countReader{r: r.Body}
		r.Body = body
		rp.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), injectKey{}, set)))
		m.record(sb.name, api.EgressEvent{Kind: api.EgressHTTPS, Host: sni, IP: target.Addr().String(), Port: int(target.Port()),
			Allowed: true, Rule: dec.Rule, Injected: len(set) > 0, Method: r.Method, Path: r.URL.Path, Status: rw.status,
			BytesOut: body.n, BytesIn: rw.n})
	})
	ln := &oneConnListener{c: tc, done: make(chan struct{})}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				ln.finish()
			}
		},
	}
	_ = srv.Serve(ln)
	ev.BytesOut, ev.BytesIn = c.in.Load(), c.out.Load()
	m.record(sb.name, ev)
}

type injectKey struct{}

// oneConnListener hands out one connection, then blocks until it ends.
type oneConnListener struct {
	c    net.Conn
	used bool
	done chan struct{}
	once sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if !l.used {
		l.used = true
		return l.c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) finish()        { l.once.Do(func() { close(l.done) }) }
func (l *oneConnListener) Close() error   { l.finish(); return nil }
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

// statusWriter notes the status and body bytes of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// countReader counts a request body's bytes.
type countReader struct {
	r io.ReadCloser
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countReader) Close() error { return c.r.Close() }
