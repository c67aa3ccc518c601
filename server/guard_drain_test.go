package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestErrorAnswerReachesClientStillSending: a handler that forwards the
// request body to an upstream (as the E2B face forwards an upload to the
// agent) gets an error answer before the body is read; the HTTP client
// then closes the body. The client, still sending 32 MiB, must be able to
// send it all and read the answer: the guard drains what it still sends
// after the answer. Negative control: the same handler without the guard,
// where net/http discards 256 KiB and closes, so the client's sending
// fails.
func TestErrorAnswerReachesClientStillSending(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no space left", http.StatusInsufficientStorage)
	}))
	defer upstream.Close()
	forward := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, upstream.URL, r.Body)
		req.ContentLength = r.ContentLength
		resp, err := upstream.Client().Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	})
	const size = 32 << 20
	send := func(h http.Handler) (sendErr error, status int, readErr error) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size)
		sent := make(chan error, 1)
		go func() {
			_, err := io.Copy(c, io.LimitReader(zeros{}, size))
			sent <- err
		}()
		resp, rerr := http.ReadResponse(bufio.NewReader(c), nil)
		if rerr == nil {
			status = resp.StatusCode
			resp.Body.Close()
		}
		return <-sent, status, rerr
	}
	guarded := Guard(forward, GuardOptions{})
	sendErr, status, readErr := send(guarded)
	if sendErr != nil || readErr != nil || status != http.StatusInsufficientStorage {
		t.Fatalf("guarded: send err %v, answer %d, read err %v; want the whole body sent and 507", sendErr, status, readErr)
	}
	if sendErr, _, _ := send(forward); sendErr == nil {
		t.Fatal("control: without the guard the client sent all 32 MiB; the test does not reach the reset it guards against")
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

