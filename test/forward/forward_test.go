package forward

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/control/forward"
	procpb "github.com/berth-sh/berth/e2b/envdpb/process"
	"github.com/berth-sh/berth/e2b/envdpb/process/processconnect"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// A sandbox placed on n3 by a create at n1 answers exec (buffered and
// streamed), files, a PTY WebSocket and a watch stream through every
// node, and only n3's node is ever used.
func TestNativeThroughEveryNode(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.placeOn("box", "n3")
	before := c.agentUses()
	sb, err := client.New(c.nodes["n1"].user.URL, adminKey).Create(ctx, api.CreateSandboxRequest{Name: "box", Image: "debian"})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := c.st.Get(ctx, "box"); err != nil || rec.Owner != "n3" || sb.Name != "box" {
		t.Fatalf("create through n1: record %+v %v", rec, err)
	}
	dir := t.TempDir()
	for i, entry := range []string{"n1", "n2", "n3"} {
		cl := client.New(c.nodes[entry].user.URL, adminKey)
		got, err := cl.Get(ctx, "box")
		if err != nil || got.Labels["answered-by"] != "n3" {
			t.Fatalf("get through %s: %+v %v", entry, got.Labels, err)
		}
		res, err := cl.Exec(ctx, "box", api.ExecRequest{Argv: []string{"sh", "-c", "echo hi from $0", entry}})
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "hi from "+entry {
			t.Fatalf("exec through %s: %+v %v", entry, res, err)
		}
		// Streamed: the first line arrives while the command still runs.
		first := make(chan time.Time, 1)
		var out bytes.Buffer
		w := writerFunc(func(p []byte) (int, error) {
			select {
			case first <- time.Now():
			default:
			}
			return out.Write(p)
		})
		t0 := time.Now()
		st, err := cl.ExecStream(ctx, "box", api.ExecRequest{Command: "echo a; sleep 1; echo b"}, w, io.Discard)
		end := time.Now()
		if err != nil || st.ExitCode != 0 || out.String() != "a\nb\n" {
			t.Fatalf("stream through %s: %+v %q %v", entry, st, out.String(), err)
		}
		if f := <-first; end.Sub(f) < 700*time.Millisecond {
			t.Fatalf("through %s the first line came %s after the start and %s before the end: buffered", entry, f.Sub(t0), end.Sub(f))
		}
		// Files: write through this node, read through the next.
		p := filepath.Join(dir, fmt.Sprintf("f%d", i))
		if err := cl.WriteFile(ctx, "box", p, strings.NewReader("content via "+entry), 0o644); err != nil {
			t.Fatalf("write through %s: %v", entry, err)
		}
		next := client.New(c.nodes[[]string{"n2", "n3", "n1"}[i]].user.URL, adminKey)
		rc, err := next.ReadFile(ctx, "box", p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "content via "+entry {
			t.Fatalf("read back: %q", b)
		}
	}
	// PTY: a terminal made through n2, attached through n1.
	if _, err := client.New(c.nodes["n2"].user.URL, adminKey).CreateTerminal(ctx, "box", api.CreateTerminalRequest{ID: "main", Shell: "/bin/sh"}); err != nil {
		t.Fatal(err)
	}
	conn, err := client.New(c.nodes["n1"].user.URL, adminKey).AttachTerminal(ctx, "box", "main", 80, 24)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Write(ctx, websocket.MessageBinary, []byte("echo pty-$((6*7))\n")); err != nil {
		t.Fatal(err)
	}
	var term bytes.Buffer
	for !strings.Contains(term.String(), "pty-42") {
		typ, p, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("terminal through n1 (have %q): %v", term.String(), err)
		}
		if typ == websocket.MessageBinary {
			term.Write(p)
		}
	}
	conn.Close(websocket.StatusNormalClosure, "")
	// Watch through n2 while a file is written through n1.
	wdir := filepath.Join(dir, "watched")
	os.Mkdir(wdir, 0o777)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	events := make(chan api.WatchEvent, 16)
	go client.New(c.nodes["n2"].user.URL, adminKey).Watch(wctx, "box", wdir, client.WatchOptions{}, func(e api.WatchEvent) error {
		events <- e
		return nil
	})
	if e := <-events; e.Type != "watching" {
		t.Fatalf("first watch event %+v", e)
	}
	if err := client.New(c.nodes["n1"].user.URL, adminKey).WriteFile(ctx, "box", filepath.Join(wdir, "new.txt"), strings.NewReader("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for e := range events {
		if strings.HasSuffix(e.Path, "new.txt") {
			break
		}
	}
	c.onlyOwnerUsed("n3", before)
	// Destroy through n2 reaches the owner (its node forgets the sandbox).
	if err := client.New(c.nodes["n2"].user.URL, adminKey).Destroy(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.nodes["n3"].be.fake.Status(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.nodes["n3"].be.fake.Status(ctx, "box"); st.Exists {
		t.Fatal("the owner's node still has the sandbox")
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A get-or-create of a missing name is placed too; of an existing one it
// goes to the owner.
func TestGetOrCreatePlaced(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	ctx := context.Background()
	c.placeOn("goc", "n2")
	cl := client.New(c.nodes["n1"].user.URL, adminKey)
	if _, created, err := cl.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "goc"}); err != nil || !created {
		t.Fatalf("first: %v %v", created, err)
	}
	if rec, _ := c.st.Get(ctx, "goc"); rec.Owner != "n2" {
		t.Fatalf("owner %q", rec.Owner)
	}
	c.placeOn("goc", "n1") // placement would now say n1: the owner wins
	sb, created, err := cl.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "goc"})
	if err != nil || created || sb.Name != "goc" {
		t.Fatalf("second: %+v %v %v", sb, created, err)
	}
	if st, _ := c.nodes["n1"].be.fake.Status(ctx, "goc"); st.Exists {
		t.Fatal("the second get-or-create made a copy on n1")
	}
}

// The E2B SDK's traffic at n3 drives a sandbox that runs on n2: create
// (placed), get, envd files up and down, a streamed process, kill.
func TestE2BThroughNonOwner(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.place["*"] = "n2"
	before := c.agentUses()
	res := e2bControl(t, c.nodes["n3"].user.URL, "POST", "/sandboxes", `{"templateID":"base","timeout":60}`)
	if res.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("create: %d %s", res.StatusCode, b)
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	json.NewDecoder(res.Body).Decode(&sb)
	res.Body.Close()
	if rec, err := c.st.Get(ctx, sb.SandboxID); err != nil || rec.Owner != "n2" {
		t.Fatalf("E2B create through n3: %+v %v", rec, err)
	}
	res = e2bControl(t, c.nodes["n1"].user.URL, "GET", "/sandboxes/"+sb.SandboxID, "")
	if res.StatusCode != 200 {
		t.Fatalf("get through n1: %d", res.StatusCode)
	}
	res.Body.Close()

	// envd /files through n3: upload then download.
	dir := t.TempDir()
	path := filepath.Join(dir, "e2b.txt")
	var body bytes.Buffer
	mw := multipartFile(&body, "file", "e2b.txt", "from the sdk")
	req, _ := http.NewRequest("POST", c.nodes["n3"].user.URL+"/files?path="+path, &body)
	req.Header.Set("Content-Type", mw)
	envdHeaders(req, sb.SandboxID, sb.EnvdAccessToken)
	r, err := http.DefaultClient.Do(req)
	if err != nil || r.StatusCode != 200 {
		b, _ := io.ReadAll(r.Body)
		t.Fatalf("upload: %v %d %s", err, r.StatusCode, b)
	}
	r.Body.Close()
	req, _ = http.NewRequest("GET", c.nodes["n1"].user.URL+"/files?path="+path, nil)
	envdHeaders(req, sb.SandboxID, sb.EnvdAccessToken)
	r, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(got) != "from the sdk" {
		t.Fatalf("download through n1: %d %q", r.StatusCode, got)
	}
	// A wrong envd token is refused at the entry.
	req, _ = http.NewRequest("GET", c.nodes["n1"].user.URL+"/files?path="+path, nil)
	envdHeaders(req, sb.SandboxID, "ea_wrong")
	if r, _ := http.DefaultClient.Do(req); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", r.StatusCode)
	}

	// A process streamed over Connect through n3, over HTTP/1.1 and over
	// cleartext HTTP/2 (the forward itself is HTTP/1.1).
	cwd := dir // the agent's fake passwd has no /home/user
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	for _, hc := range []*http.Client{http.DefaultClient, {Transport: h2c}} {
		pc := processconnect.NewProcessClient(hc, c.nodes["n3"].user.URL)
		preq := connect.NewRequest(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo one; sleep 0.5; echo two"}, Cwd: &cwd}})
		envdHeaderSet(preq.Header(), sb.SandboxID, sb.EnvdAccessToken)
		// The acting user rides in envd's Basic Authorization: the app's
		// own header on the data plane, which must travel through.
		preq.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
		stream, err := pc.Start(ctx, preq)
		if err != nil {
			t.Fatal(err)
		}
		var stdout strings.Builder
		exit := int32(-1)
		var firstAt, endAt time.Time
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			if d := ev.GetData(); d != nil {
				if firstAt.IsZero() {
					firstAt = time.Now()
				}
				stdout.Write(d.GetStdout())
			}
			if e := ev.GetEnd(); e != nil {
				exit, endAt = e.GetExitCode(), time.Now()
			}
		}
		if err := stream.Err(); err != nil || exit != 0 || stdout.String() != "one\ntwo\n" {
			t.Fatalf("process through n3 (h2c %v): %q exit %d %v", hc != http.DefaultClient, stdout.String(), exit, err)
		}
		if endAt.Sub(firstAt) < 300*time.Millisecond {
			t.Fatalf("process output came all at once (%s apart): buffered", endAt.Sub(firstAt))
		}
	}
	c.onlyOwnerUsed("n2", before)

	// Kill through n1; the owner's node loses it.
	res = e2bControl(t, c.nodes["n1"].user.URL, "DELETE", "/sandboxes/"+sb.SandboxID, "")
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("kill through n1: %d", res.StatusCode)
	}
	if st, _ := c.nodes["n2"].be.fake.Status(ctx, sb.SandboxID); st.Exists {
		t.Fatal("killed sandbox still on its owner")
	}
}

func e2bControl(t *testing.T, base, method, path, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", adminKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func envdHeaders(r *http.Request, id, token string) { envdHeaderSet(r.Header, id, token) }

func envdHeaderSet(h http.Header, id, token string) {
	h.Set("E2b-Sandbox-Id", id)
	h.Set("E2b-Sandbox-Port", "49983")
	h.Set("X-Access-Token", token)
}

// A preview URL (host form and path form) at a non-owner's preview
// listener reaches the server in the sandbox; a private one admits
// berth's key, checked at the entry, and the key never reaches the app.
func TestPreviewThroughNonOwner(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	ctx := context.Background()
	c.placeOn("web", "n2")
	if _, err := client.New(c.nodes["n1"].user.URL, adminKey).Create(ctx, api.CreateSandboxRequest{Name: "web"}); err != nil {
		t.Fatal(err)
	}
	var sawAuth atomic.Value
	var leaked atomic.Int64
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawAuth.Store(r.Header.Get("Authorization"))
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-berth-forward-") {
				leaked.Add(1)
			}
		}
		fmt.Fprintf(w, "app at %s host %s", r.URL.Path, r.Host)
	}))
	defer app.Close()
	port := app.Listener.Addr().(*net.TCPAddr).Port
	owner := c.nodes["n2"]
	pub := owner.expose("web", port, false)
	before := c.agentUses()
	get := func(host, path string, hdr ...string) (int, string) {
		req, _ := http.NewRequest("GET", c.nodes["n1"].preview.URL+path, nil)
		if host != "" {
			req.Host = host
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	label := fmt.Sprintf("%d-web-%s", port, pub.Token)
	if st, b := get(label+".preview.test", "/hello", "Authorization", "Basic YXBwOnB3", forward.HeaderTenant, "t9"); st != 200 || !strings.HasPrefix(b, "app at /hello host "+label) {
		t.Fatalf("host form through n1: %d %s", st, b)
	}
	if a, _ := sawAuth.Load().(string); a != "Basic YXBwOnB3" {
		t.Fatalf("the app's own Authorization did not travel: %q", a)
	}
	if st, b := get("", "/preview/"+label+"/x"); st != 200 || !strings.HasPrefix(b, "app at /x") {
		t.Fatalf("path form through n1: %d %s", st, b)
	}
	// Private.
	pv := owner.expose("web", port, true)
	plabel := fmt.Sprintf("%d-web-%s", port, pv.Token)
	if st, b := get(plabel+".preview.test", "/p"); st != http.StatusUnauthorized {
		t.Fatalf("private without the key: %d %s", st, b)
	}
	// A forged "key verified" header from a user is stripped.
	if st, b := get(plabel+".preview.test", "/p", forward.HeaderKey, "1"); st != http.StatusUnauthorized {
		t.Fatalf("private with a forged header: %d %s", st, b)
	}
	if st, b := get(plabel+".preview.test", "/p", "Authorization", "Bearer "+adminKey); st != 200 || !strings.HasPrefix(b, "app at /p") {
		t.Fatalf("private with the key through n1: %d %s", st, b)
	}
	if a, _ := sawAuth.Load().(string); a != "" {
		t.Fatalf("berth's key reached the app: %q", a)
	}
	// A wrong token is the owner's 404.
	if st, _ := get(fmt.Sprintf("%d-web-%s.preview.test", port, strings.Repeat("a", 16)), "/"); st != http.StatusNotFound {
		t.Fatalf("wrong token: %d", st)
	}
	if leaked.Load() != 0 {
		t.Fatal("forwarding headers reached the sandbox's server")
	}
	c.onlyOwnerUsed("n2", before)
}

// Forwarding headers sent by a user to the user API are stripped and
// never believed; the same headers with the cluster credential on the
// node listener are (the negative control: they do carry power there).
func TestForgedIdentityHeaders(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	ctx := context.Background()
	c.place["*"] = "n2"
	for key, name := range map[string]string{"key-t1": "mine", "key-t2": "theirs"} {
		if _, err := client.New(c.nodes["n1"].user.URL, key).Create(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	forged := []string{forward.HeaderTenant, "t2", forward.HeaderHop, "1", forward.HeaderKey, "1", "X-Berth-Forward-Entry", "n2"}
	list := func(url string, hdr ...string) (int, string) {
		req, _ := http.NewRequest("GET", url+"/v1/sandboxes", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var l api.SandboxList
		b, _ := io.ReadAll(res.Body)
		json.Unmarshal(b, &l)
		var names []string
		for _, s := range l.Sandboxes {
			names = append(names, s.Name)
		}
		return res.StatusCode, strings.Join(names, ",")
	}
	for _, entry := range []string{"n1", "n2"} {
		u := c.nodes[entry].user.URL
		if st, _ := list(u, forged...); st != http.StatusUnauthorized {
			t.Fatalf("%s: forged headers without a key: %d", entry, st)
		}
		if st, _ := list(u, append(forged, "Authorization", "Bearer "+clusterToken)...); st != http.StatusUnauthorized {
			t.Fatalf("%s: the cluster credential on the user API: %d", entry, st)
		}
		if st, names := list(u, append(forged, "Authorization", "Bearer key-t1")...); st != 200 || names != "mine" {
			t.Fatalf("%s: t1 with forged t2 headers sees %d %q", entry, st, names)
		}
		// Forged headers do not carry t1 into t2's sandbox either.
		req, _ := http.NewRequest("GET", u+"/v1/sandboxes/theirs", nil)
		req.Header.Set("Authorization", "Bearer key-t1")
		for i := 0; i+1 < len(forged); i += 2 {
			req.Header.Set(forged[i], forged[i+1])
		}
		if res, _ := http.DefaultClient.Do(req); res.StatusCode != http.StatusNotFound {
			t.Fatalf("%s: t1 reached t2's sandbox: %d", entry, res.StatusCode)
		}
		// E2B: forged headers without X-API-Key.
		req, _ = http.NewRequest("GET", u+"/v2/sandboxes", nil)
		for i := 0; i+1 < len(forged); i += 2 {
			req.Header.Set(forged[i], forged[i+1])
		}
		if res, _ := http.DefaultClient.Do(req); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: E2B with forged headers: %d", entry, res.StatusCode)
		}
	}
	// Negative control: the node listener with the credential believes
	// the tenant header.
	nl := c.nodes["n1"].nodeL.URL + forward.Prefix + "/api"
	if st, names := list(nl, append(forged, "Authorization", "Bearer "+clusterToken)...); st != 200 || names != "theirs" {
		t.Fatalf("node listener with the credential: %d %q", st, names)
	}
	if st, _ := list(nl, forged...); st != http.StatusUnauthorized {
		t.Fatalf("node listener without the credential: %d", st)
	}
}

// A forwarded request that reaches a node which is not the owner (the
// sandbox moved in flight) is refused with 503 "moved, retry", not sent
// on; an owner that is gone is 503 naming it, on both faces.
func TestLoopAndOwnerDown(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	c.placeOn("mover", "n3")
	if _, err := client.New(c.nodes["n1"].user.URL, adminKey).Create(ctx, api.CreateSandboxRequest{Name: "mover"}); err != nil {
		t.Fatal(err)
	}
	before := c.agentUses()
	req, _ := http.NewRequest("POST", c.nodes["n2"].nodeL.URL+forward.Prefix+"/api/v1/sandboxes/mover/exec", strings.NewReader(`{"command":["true"]}`))
	req.Header.Set("Authorization", "Bearer "+clusterToken)
	req.Header.Set(forward.HeaderHop, "1")
	req.Header.Set("X-Berth-Forward-Entry", "n1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e api.Error
	json.NewDecoder(res.Body).Decode(&e)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || e.Code != "unavailable" || !strings.Contains(e.Message, `moved to node "n3"`) {
		t.Fatalf("moved: %d %+v", res.StatusCode, e)
	}
	c.onlyOwnerUsed("", before) // nobody ran it

	// The owner is gone: its entry is removed.
	if err := c.st.DeleteNode(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	// n1 read n3's entry when it proxied the create; it routes by that
	// copy for up to forward.DefaultNodeCacheAge (n3 still owns the record
	// and would serve). Past it, the entry is read again and is gone.
	time.Sleep(forward.DefaultNodeCacheAge + 200*time.Millisecond)
	_, err = client.New(c.nodes["n1"].user.URL, adminKey).Exec(ctx, "mover", api.ExecRequest{Command: "true"})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), `node "n3"`) {
		t.Fatalf("owner gone, native: %v", err)
	}
	// The owner stops answering: its entry points at a closed port.
	c.nodes["n3"].nodeL.Close()
	if _, err := c.st.PutNode(ctx, storeNode("n3", c.nodes["n3"].nodeL.URL)); err != nil {
		t.Fatal(err)
	}
	_, err = client.New(c.nodes["n2"].user.URL, adminKey).Exec(ctx, "mover", api.ExecRequest{Command: "true"})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), `node "n3"`) || !strings.Contains(err.Error(), "cannot be reached") {
		t.Fatalf("owner unreachable, native: %v", err)
	}
}

// A 100 MB file downloads through a non-owner with the whole path (the
// owner's agent, its API, the forward, the entry's API) in this process,
// and the heap never holds more than a small part of it.
func TestLargeDownloadStreams(t *testing.T) {
	const size = 100 << 20
	c := newCluster(t, "n1", "n2")
	ctx := context.Background()
	c.placeOn("big", "n2")
	if _, err := client.New(c.nodes["n1"].user.URL, adminKey).Create(ctx, api.CreateSandboxRequest{Name: "big"}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "big.bin")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	for n := 0; n < size; n += len(chunk) {
		f.Write(chunk)
		h.Write(chunk)
	}
	f.Close()
	want := hex.EncodeToString(h.Sum(nil))
	var got string
	var n int64
	peak := peakHeap(func() {
		rc, err := client.New(c.nodes["n1"].user.URL, adminKey).ReadFile(ctx, "big", p)
		if err != nil {
			t.Error(err)
			return
		}
		defer rc.Close()
		h := sha256.New()
		n, _ = io.Copy(h, rc)
		got = hex.EncodeToString(h.Sum(nil))
	})
	if n != size || got != want {
		t.Fatalf("downloaded %d bytes, sha256 %s; want %d, %s", n, got, size, want)
	}
	t.Logf("100 MiB through n1 from n2: heap peak %d KiB above baseline", peak>>10)
	if peak > 32<<20 {
		t.Fatalf("heap peak %d bytes: something buffers the download", peak)
	}
}

// A 100 MiB upload through a non-owner lands whole on the owner's side,
// with a bounded heap.
func TestLargeUploadStreams(t *testing.T) {
	const size = 100 << 20
	c := newCluster(t, "n1", "n2")
	ctx := context.Background()
	c.placeOn("up", "n2")
	if _, err := client.New(c.nodes["n1"].user.URL, adminKey).Create(ctx, api.CreateSandboxRequest{Name: "up"}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "up.bin")
	src := &pattern{n: size}
	peak := peakHeap(func() {
		if err := client.New(c.nodes["n1"].user.URL, adminKey).WriteFile(ctx, "up", p, src, 0o644); err != nil {
			t.Error(err)
		}
	})
	want := sha256.New()
	io.Copy(want, &pattern{n: size})
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := sha256.New()
	n, _ := io.Copy(got, f)
	if n != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("uploaded %d bytes, digest mismatch %v", n, !bytes.Equal(got.Sum(nil), want.Sum(nil)))
	}
	t.Logf("100 MiB through n1 to n2: heap peak %d KiB above baseline", peak>>10)
	if peak > 32<<20 {
		t.Fatalf("heap peak %d bytes: something buffers the upload", peak)
	}
}

// pattern yields n bytes of a repeating pattern.
type pattern struct{ n, off int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n {
		b = b[:p.n]
	}
	for i := range b {
		b[i] = byte((p.off + int64(i)) % 251)
	}
	p.off += int64(len(b))
	p.n -= int64(len(b))
	return len(b), nil
}

func peakHeap(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapInuse > base && m.HeapInuse-base > peak.Load() {
					peak.Store(m.HeapInuse - base)
				}
			}
		}
	}()
	f()
	close(done)
	return peak.Load()
}

func storeNode(name, addr string) store.Node {
	return store.Node{Name: name, Addr: addr, Roles: []string{"control", "node"}, StartedAt: time.Now()}
}

// multipartFile writes one file part to body and returns the Content-Type.
func multipartFile(body *bytes.Buffer, field, name, content string) string {
	mw := multipart.NewWriter(body)
	fw, _ := mw.CreateFormFile(field, name)
	io.WriteString(fw, content)
	mw.Close()
	return mw.FormDataContentType()
}
