package s3test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// FaultProxy sits between a client and the real S3 server and injects the
// faults of the adversarial checklist's #32: a run of 503s (FailNext), an
// endpoint that is down (Down), and blob bodies corrupted in flight
// (Corrupt). The Host header is passed on as the client sent it, which is
// what it signed, so SigV4 still verifies at the real server.
type FaultProxy struct {
	*httptest.Server
	FailNext atomic.Int32 // answer this many more requests with 503
	Down     atomic.Bool  // answer every request with 503
	Corrupt  atomic.Bool  // flip one byte of every blob body served
	Requests atomic.Int64 // requests received
	Failed   atomic.Int64 // requests answered with an injected 503
	BlobGets atomic.Int64 // successful GETs of blobs (names ending ".blob~")
}

// NewFaultProxy starts a FaultProxy in front of endpoint; it is closed
// when t ends.
func NewFaultProxy(t testing.TB, endpoint string) *FaultProxy {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Method == http.MethodGet && strings.HasSuffix(resp.Request.URL.Path, ".blob~") && resp.StatusCode == http.StatusOK {
				p.BlobGets.Add(1)
				if p.Corrupt.Load() {
					resp.Body = &flipReader{r: resp.Body, at: 200}
				}
			}
			return nil
		},
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Requests.Add(1)
		if p.Down.Load() || p.takeFailure() {
			p.Failed.Add(1)
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>injected by the test</Message></Error>`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// takeFailure uses up one of FailNext, if any are left.
func (p *FaultProxy) takeFailure() bool {
	for {
		n := p.FailNext.Load()
		if n <= 0 {
			return false
		}
		if p.FailNext.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// flipReader flips one byte at offset at of the stream.
type flipReader struct {
	r   io.ReadCloser
	at  int64
	off int64
}

func (f *flipReader) Read(b []byte) (int, error) {
	n, err := f.r.Read(b)
	if f.at >= f.off && f.at < f.off+int64(n) {
		b[f.at-f.off] ^= 0x5a
	}
	f.off += int64(n)
	return n, err
}

func (f *flipReader) Close() error { return f.r.Close() }
