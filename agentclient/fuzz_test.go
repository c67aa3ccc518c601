package agentclient

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
)

// FuzzAgentAnswers plays a hostile agent: whatever bytes it answers with
// (an exec frame stream, a JSON body, an error body, under a fuzzed HTTP
// status), the host side must not panic, must not hang, must bound what it
// keeps, and must turn garbage into an error rather than invent a result. The first byte picks the call. Seeds live in
// testdata/fuzz/FuzzAgentAnswers.
func FuzzAgentAnswers(f *testing.F) {
	var stream bytes.Buffer
	wire.WriteFrame(&stream, wire.Stdout, []byte("hello\n"))
	wire.WriteFrame(&stream, wire.Stderr, []byte("warn\n"))
	wire.WriteFrame(&stream, wire.Heartbeat, nil)
	wire.WriteFrame(&stream, wire.Exit, []byte(`{"exitCode":3,"durationMs":5}`))
	var errStream bytes.Buffer
	wire.WriteFrame(&errStream, wire.Error, []byte(`{"code":"not_found","message":"x"}`))
	f.Add(byte(0), uint16(200), stream.Bytes())
	f.Add(byte(0), uint16(200), errStream.Bytes())
	f.Add(byte(0), uint16(200), []byte{byte(wire.Exit), 0xff, 0xff, 0xff, 0xff})
	f.Add(byte(0), uint16(500), []byte(`{"code":"internal","message":"boom"}`))
	f.Add(byte(1), uint16(200), []byte(`{"path":"/a","name":"a","size":3,"mode":420}`))
	f.Add(byte(2), uint16(200), []byte(`[{"path":"/a","name":"a"}]`))
	f.Add(byte(2), uint16(200), []byte(`{"files":[`))
	f.Add(byte(3), uint16(200), []byte("file contents"))
	f.Add(byte(4), uint16(200), []byte(`{"status":"ok","version":"x","protocol":1}`))
	f.Add(byte(4), uint16(404), []byte(`{"code":"not_found"}`))

	var body atomic.Value
	var status atomic.Int32
	dir := shortDir(f)
	sock := filepath.Join(dir, "a.sock")
	fakeAgent(f, sock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := body.Load().([]byte)
		if r.URL.Path == "/v1/exec" {
			w.Header().Set("Content-Type", wire.ExecContentType)
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(int(status.Load()))
		w.Write(b)
	}))
	c := newClient(sock, naiveDial)
	c.StallTimeout = 2 * time.Second
	f.Fuzz(func(t *testing.T, which byte, code uint16, data []byte) {
		st := int(code%500) + 100
		if st < 200 && st >= 100 {
			st = 200 // 1xx answers are not final responses
		}
		body.Store(data)
		status.Store(int32(st))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		switch which % 5 {
		case 0:
			var out, errOut bytes.Buffer
			var es api.ExitStatus
			es, err = c.Exec(ctx, api.ExecRequest{Argv: []string{"true"}}, &out, &errOut)
			if err == nil && out.Len()+errOut.Len() > len(data) {
				t.Fatalf("exec produced %d bytes of output from a %d-byte answer", out.Len()+errOut.Len(), len(data))
			}
			_ = es
		case 1:
			_, _ = c.Stat(ctx, "/a") // any answer will do: the check is that it returns
		case 2:
			_, _ = c.ListFiles(ctx, "/", false)
		case 3:
			var rc io.ReadCloser
			if rc, err = c.ReadFile(ctx, "/a"); err == nil {
				n, _ := io.Copy(io.Discard, rc)
				rc.Close()
				if n > int64(len(data)) {
					t.Fatalf("read %d bytes from a %d-byte answer", n, len(data))
				}
			}
		case 4:
			_, _ = c.Health(ctx)
		}
		if ctx.Err() != nil {
			t.Fatalf("call %d hung on a %d-byte answer", which%5, len(data))
		}
	})
}
