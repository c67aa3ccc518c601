package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// BenchmarkHTTPS measures one HTTPS GET on a new connection (TCP + TLS
// handshake + request), on loopback:
//
//	direct    - straight to the upstream server (no proxy)
//	tunnel    - through the proxy, matched by SNI and tunnelled
//	intercept - through the proxy, TLS terminated, a header injected, TLS
//	            re-originated to the upstream
//
// It reports the median (p50-ms) beside Go's mean, and the request rate
// with 4×GOMAXPROCS clients in parallel (parallel-req/s), on new
// connections and on kept-alive ones. Run:
//
//	go test -run XXX -bench HTTPS -benchtime 2000x ./egress/
func BenchmarkHTTPS(b *testing.B) {
	f := newFakeNet(b, api.NetworkPolicy{Allow: []string{"api.internal.test"}})
	inject := api.NetworkPolicy{Allow: []string{"api.internal.test"}, Inject: []api.InjectRule{
		{Host: "api.internal.test", SetHeaders: map[string]string{"Authorization": "Bearer ${secret:gh}"}}}}
	cases := []struct {
		name  string
		dial  string
		roots *x509.CertPool
		pol   api.NetworkPolicy
	}{
		{"direct", f.tlsAddr.String(), f.upRoots, api.NetworkPolicy{}},
		{"tunnel", f.proxy, f.upRoots, api.NetworkPolicy{Allow: []string{"api.internal.test"}}},
		{"intercept", f.proxy, f.caPool(), inject},
	}
	for _, c := range cases {
		f.m.SetPolicy("sb", c.pol)
		newClient := func(keepAlive bool) *http.Client {
			return &http.Client{Transport: &http.Transport{
				DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return net.Dial("tcp", c.dial) },
				TLSClientConfig:   &tls.Config{RootCAs: c.roots, ServerName: "api.internal.test"},
				DisableKeepAlives: !keepAlive,
			}}
		}
		client := func() *http.Client { return newClient(false) }
		get := func(hc *http.Client) {
			res, err := hc.Get("https://api.internal.test/")
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				b.Fatal(res.Status)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			hc := client()
			d := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				get(hc)
				d = append(d, time.Since(t0))
			}
			sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
			b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
		})
		b.Run(c.name+"-parallel", func(b *testing.B) {
			b.SetParallelism(4) // 4 × GOMAXPROCS clients
			t0 := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				hc := client()
				for pb.Next() {
					get(hc)
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "parallel-req/s")
		})
		// Requests on kept-alive connections: the proxy's per-request
		// cost (for intercept: header injection, upstream reuse).
		b.Run(c.name+"-keepalive-parallel", func(b *testing.B) {
			b.SetParallelism(4)
			t0 := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				hc := newClient(true)
				for pb.Next() {
					get(hc)
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "parallel-req/s")
		})
	}
}
