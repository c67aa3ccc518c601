package e2b

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/api"
	fspb "github.com/berth-sh/berth/e2b/envdpb/filesystem"
	"github.com/berth-sh/berth/e2b/envdpb/filesystem/filesystemconnect"
)

const testKey = "e2b_0123456789abcdef0123456789abcdef01234567"

type env struct {
	t     *testing.T
	h     *Handler
	f     *fakeBackend
	dir   string // a directory the in-process agent can read
	url   string
	id    string
	token string
}

func setup(t *testing.T) *env {
	f, a := newFake(t)
	h := New(f, Options{APIKey: testKey})
	native := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := httptest.NewUnstartedServer(h.Wrap(native))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	e := &env{t: t, h: h, f: f, dir: a.Dir, url: srv.URL}
	res := e.control(http.MethodPost, "/v2/sandboxes", `{"templateID":"base","metadata":{"k":"v"},"timeout":60}`, testKey)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", res.StatusCode)
	}
	var sb sandboxBody
	if err := json.NewDecoder(res.Body).Decode(&sb); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	e.id, e.token = sb.SandboxID, sb.EnvdAccessToken
	return e
}

func (e *env) control(method, path, body, key string) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

func (e *env) data(method, path, token string, hdr map[string]string) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.url+path, nil)
	req.Header.Set("E2b-Sandbox-Id", e.id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

func decodeErr(t *testing.T, res *http.Response) apiError {
	t.Helper()
	defer res.Body.Close()
	var ae apiError
	if err := json.NewDecoder(res.Body).Decode(&ae); err != nil {
		t.Fatalf("error body: %v", err)
	}
	return ae
}

func TestIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newID()
		if !validID(id) || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "ABCDEFGHIJ0123456789", "abc-efghij0123456789", "abcdefghij012345678"} {
		if validID(bad) {
			t.Errorf("validID(%q) = true", bad)
		}
	}
}

func TestControlPlaneNeedsTheKey(t *testing.T) {
	e := setup(t)
	for _, key := range []string{"", "e2b_" + strings.Repeat("0", 40)} {
		res := e.control(http.MethodGet, "/v2/sandboxes", "", key)
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("key %q: status %d, want 401", key, res.StatusCode)
		}
		if ae := decodeErr(t, res); ae.Code != 401 || ae.Message == "" {
			t.Fatalf("key %q: body %+v", key, ae)
		}
	}
	res := e.control(http.MethodGet, "/v2/sandboxes", "", testKey)
	var list []detailBody
	json.NewDecoder(res.Body).Decode(&list)
	res.Body.Close()
	if res.StatusCode != 200 || len(list) != 1 || list[0].SandboxID != e.id || list[0].Metadata["k"] != "v" {
		t.Fatalf("list: %d %+v", res.StatusCode, list)
	}
	// Unknown E2B routes are a clear 404 {code, message}, never a hang.
	res = e.control(http.MethodGet, "/v1/sandboxes", "", testKey)
	if res.StatusCode != 418 { // not an E2B route: the native API answers
		t.Fatalf("native fallthrough: %d", res.StatusCode)
	}
	for _, p := range []string{"/templates/abc/builds/x/logs", "/v3/templates", "/secrets", "/volumes/v1"} {
		res = e.control(http.MethodGet, p, "", testKey)
		if ae := decodeErr(t, res); res.StatusCode != 404 || ae.Code != 404 || !strings.Contains(ae.Message, "not supported") {
			t.Fatalf("unsupported route %s: %d %+v", p, res.StatusCode, ae)
		}
	}
	res = e.control(http.MethodPost, "/sandboxes/"+e.id+"/pause", "{}", testKey)
	res.Body.Close()
	res = e.control(http.MethodPost, "/sandboxes/"+e.id+"/pause", "{}", testKey)
	if ae := decodeErr(t, res); res.StatusCode != 409 || ae.Code != 409 {
		t.Fatalf("second pause: %d %+v", res.StatusCode, ae)
	}
}

// TestAccessTokenEnforced: the data plane needs the sandbox's own token.
// The negative control switches the check off (e2b-access-token) and the
// same probe gets through.
func TestAccessTokenEnforced(t *testing.T) {
	e := setup(t)
	p := filepath.Join(e.dir, "secret.txt")
	if err := os.WriteFile(p, []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := func(token string) int {
		res := e.data(http.MethodGet, "/files?path="+p, token, nil)
		res.Body.Close()
		return res.StatusCode
	}
	other := New(e.f, Options{APIKey: "e2b_" + strings.Repeat("1", 40)}).accessToken(e.id)
	for _, tok := range []string{"", "wrong", other} {
		if st := probe(tok); st != http.StatusUnauthorized {
			t.Fatalf("token %q: status %d, want 401", tok, st)
		}
	}
	if st := probe(e.token); st != http.StatusOK {
		t.Fatalf("right token: status %d", st)
	}
	res := e.data(http.MethodGet, "/envs", e.token, nil)
	if ae := decodeErr(t, res); res.StatusCode != 404 || ae.Code != 404 {
		t.Fatalf("unserved envd route: %d %+v", res.StatusCode, ae)
	}
	e.h.weakToken = true // negative control
	if st := probe(""); st != http.StatusOK {
		t.Fatalf("with the check off the probe should get through, got %d", st)
	}
}

func sign(path, op, user, token string, exp int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != 0 {
		raw += ":" + strconv.FormatInt(exp, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

func TestSignedURLs(t *testing.T) {
	e := setup(t)
	p := filepath.Join(e.dir, "signed.txt")
	os.WriteFile(p, []byte("signed"), 0o644)
	get := func(q string) (int, string) {
		res, err := http.Get(e.url + "/files?" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(res.Body)
		return res.StatusCode, b.String()
	}
	q := func(sig string, exp int64) string {
		v := url.Values{"path": {p}, "signature": {sig}}
		if exp != 0 {
			v.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		return v.Encode()
	}
	exp := time.Now().Add(time.Minute).Unix()
	if st, body := get(q(sign(p, "read", "", e.token, exp), exp)); st != 200 || body != "signed" {
		t.Fatalf("signed read: %d %q", st, body)
	}
	if st, _ := get(q(sign(p, "write", "", e.token, 0), 0)); st != 401 {
		t.Fatalf("write signature used to read: %d", st)
	}
	old := time.Now().Add(-time.Minute).Unix()
	if st, body := get(q(sign(p, "read", "", e.token, old), old)); st != 401 || !strings.Contains(body, "expired") {
		t.Fatalf("expired: %d %s", st, body)
	}
	if st, _ := get(q(sign(p, "read", "", "not-the-token", 0), 0)); st != 401 {
		t.Fatalf("signature with another token: %d", st)
	}
}

func TestHealthAndHostRouting(t *testing.T) {
	e := setup(t)
	for _, viaHost := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodGet, e.url+"/health", nil)
		if viaHost {
			req.Host = "49983-" + e.id + ".sandbox.example"
		} else {
			req.Header.Set("E2b-Sandbox-Id", e.id)
			req.Header.Set("E2b-Sandbox-Port", "49983")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNoContent {
			t.Fatalf("health (host=%v): %d", viaHost, res.StatusCode)
		}
	}
	res := e.control(http.MethodDelete, "/sandboxes/"+e.id, "", testKey)
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("kill: %d", res.StatusCode)
	}
	res = e.data(http.MethodGet, "/health", "", nil)
	var gone map[string]any
	json.NewDecoder(res.Body).Decode(&gone)
	res.Body.Close()
	if res.StatusCode != 502 || gone["sandboxId"] != e.id || gone["message"] != "The sandbox was not found" || gone["code"] != float64(502) {
		t.Fatalf("health after kill: %d %v", res.StatusCode, gone)
	}
	if res := e.control(http.MethodDelete, "/sandboxes/"+e.id, "", testKey); res.StatusCode != 404 {
		t.Fatalf("second kill: %d", res.StatusCode)
	}
}

func (e *env) connectClient(h2c bool, opts ...connect.ClientOption) filesystemconnect.FilesystemClient {
	hc := &http.Client{}
	if h2c {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		hc.Transport = tr
	}
	hdr := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
			r.Header().Set("E2b-Sandbox-Id", e.id)
			r.Header().Set("E2b-Sandbox-Port", "49983")
			r.Header().Set("X-Access-Token", e.token)
			return next(ctx, r)
		}
	})
	return filesystemconnect.NewFilesystemClient(hc, e.url, append(opts, connect.WithInterceptors(hdr, streamHeaders{e}))...)
}

type streamHeaders struct{ e *env }

func (s streamHeaders) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (s streamHeaders) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		c := next(ctx, spec)
		c.RequestHeader().Set("E2b-Sandbox-Id", s.e.id)
		c.RequestHeader().Set("E2b-Sandbox-Port", "49983")
		c.RequestHeader().Set("X-Access-Token", s.e.token)
		c.RequestHeader().Set("Keepalive-Ping-Interval", "1")
		return c
	}
}
func (s streamHeaders) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// TestConnectCodecs: the binary codec over h2c and the JSON codec over
// HTTP/1.1 reach the same service; errors carry Connect codes.
func TestConnectCodecs(t *testing.T) {
	e := setup(t)
	p := filepath.Join(e.dir, "codec.txt")
	os.WriteFile(p, []byte("12345"), 0o640)
	for _, tc := range []struct {
		name string
		c    filesystemconnect.FilesystemClient
	}{
		{"binary/h2c", e.connectClient(true)},
		{"json/http1", e.connectClient(false, connect.WithProtoJSON())},
	} {
		res, err := tc.c.Stat(context.Background(), connect.NewRequest(&fspb.StatRequest{Path: p}))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		en := res.Msg.Entry
		if en.Name != "codec.txt" || en.Size != 5 || en.Permissions != "-rw-r-----" || en.Type != fspb.FileType_FILE_TYPE_FILE || en.Owner != "root" {
			t.Fatalf("%s: entry %+v", tc.name, en)
		}
		_, err = tc.c.Stat(context.Background(), connect.NewRequest(&fspb.StatRequest{Path: filepath.Join(e.dir, "missing")}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("%s: missing file: %v", tc.name, err)
		}
		_, err = tc.c.MakeDir(context.Background(), connect.NewRequest(&fspb.MakeDirRequest{Path: e.dir}))
		if connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Fatalf("%s: existing dir: %v", tc.name, err)
		}
	}
}

// TestWatchStream: keepalives at the asked interval, Connect-Timeout-Ms
// honoured, and a kill ends an open stream with an error.
func TestWatchStream(t *testing.T) {
	e := setup(t)
	c := e.connectClient(true)
	ctx := context.Background()
	st, err := c.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: e.dir}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetStart() == nil {
		t.Fatalf("first event is not start: %v %v", st.Msg(), st.Err())
	}
	os.WriteFile(filepath.Join(e.dir, "new.txt"), []byte("x"), 0o644)
	gotCreate, gotKeepalive := false, false
	deadline := time.Now().Add(10 * time.Second)
	for (!gotCreate || !gotKeepalive) && time.Now().Before(deadline) && st.Receive() {
		if fe := st.Msg().GetFilesystem(); fe != nil && fe.Name == "new.txt" && fe.Type == fspb.EventType_EVENT_TYPE_CREATE {
			gotCreate = true
		}
		if st.Msg().GetKeepalive() != nil {
			gotKeepalive = true
		}
	}
	if !gotCreate || !gotKeepalive {
		t.Fatalf("create %v keepalive %v (err %v)", gotCreate, gotKeepalive, st.Err())
	}
	done := make(chan error, 1)
	go func() {
		for st.Receive() {
		}
		done <- st.Err()
	}()
	res := e.control(http.MethodDelete, "/sandboxes/"+e.id, "", testKey)
	res.Body.Close()
	select {
	case err := <-done:
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("stream after kill ended with %v, want unavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end when the sandbox was killed")
	}
}

// TestConnectTimeout: the server ends a stream at Connect-Timeout-Ms (a raw
// Connect request, so no client-side deadline is involved).
func TestConnectTimeout(t *testing.T) {
	e := setup(t)
	msg, _ := json.Marshal(map[string]any{"path": e.dir})
	var body bytes.Buffer
	body.WriteByte(0)
	binary.Write(&body, binary.BigEndian, uint32(len(msg)))
	body.Write(msg)
	req, _ := http.NewRequest(http.MethodPost, e.url+"/filesystem.Filesystem/WatchDir", &body)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", "700")
	req.Header.Set("E2b-Sandbox-Id", e.id)
	req.Header.Set("X-Access-Token", e.token)
	t0 := time.Now()
	res, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	all, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	took := time.Since(t0)
	if !bytes.Contains(all, []byte(`"deadline_exceeded"`)) || took > 10*time.Second {
		t.Fatalf("after %s the stream ended with %q, want a deadline_exceeded end frame", took, all)
	}
	t.Logf("stream ended after %s", took.Round(time.Millisecond))
}

func TestEgressMapping(t *testing.T) {
	f, tr := false, true
	for _, tc := range []struct {
		allow *bool
		n     *networkBody
		want  api.NetworkPolicy
		err   bool
	}{
		{nil, nil, api.NetworkPolicy{Internet: true}, false},
		{&f, nil, api.NetworkPolicy{Internet: false}, false},
		{&tr, &networkBody{DenyOut: []string{allTraffic}}, api.NetworkPolicy{Internet: false}, false},
		{nil, &networkBody{DenyOut: []string{allTraffic}, AllowOut: []string{"api.example.com", "1.1.1.1"}},
			api.NetworkPolicy{Internet: false, Allow: []string{"api.example.com", "1.1.1.1"}}, false},
		{nil, &networkBody{DenyOut: []string{"10.0.0.0/8"}}, api.NetworkPolicy{Internet: true, Deny: []string{"10.0.0.0/8"}}, false},
		{nil, &networkBody{Rules: map[string]any{}}, api.NetworkPolicy{}, true},
		{nil, &networkBody{AllowPublicTraffic: &f}, api.NetworkPolicy{}, true},
	} {
		got, err := egressFor(tc.allow, tc.n)
		if (err != nil) != tc.err {
			t.Errorf("egressFor(%v, %+v): err %v", tc.allow, tc.n, err)
			continue
		}
		if err == nil && (got.Internet != tc.want.Internet || !slices.Equal(got.Allow, tc.want.Allow) || !slices.Equal(got.Deny, tc.want.Deny)) {
			t.Errorf("egressFor(%v, %+v) = %+v, want %+v", tc.allow, tc.n, got, tc.want)
		}
	}
	internet, n := networkOf(api.Sandbox{Network: &api.NetworkPolicy{Internet: false, Allow: []string{"a.example"}, Deny: []string{"10.0.0.0/8"}}})
	if internet || !slices.Equal(n.AllowOut, []string{"a.example"}) || !slices.Equal(n.DenyOut, []string{"10.0.0.0/8", allTraffic}) {
		t.Errorf("networkOf: %v %+v", internet, n)
	}
}

func TestPaginate(t *testing.T) {
	items := []int{1, 2, 3, 4, 5}
	p, next, err := paginate(items, "2", "")
	if err != nil || len(p) != 2 || next != "o2" {
		t.Fatal(p, next, err)
	}
	p, next, _ = paginate(items, "2", "o4")
	if len(p) != 1 || p[0] != 5 || next != "" {
		t.Fatal(p, next)
	}
	if _, _, err := paginate(items, "0", ""); err == nil {
		t.Fatal("limit 0 accepted")
	}
	if _, _, err := paginate(items, "", "bogus"); err == nil {
		t.Fatal("bogus token accepted")
	}
}

// TestPollingWatcher: the calls the Python SDK's synchronous watch_dir uses.
func TestPollingWatcher(t *testing.T) {
	e := setup(t)
	c := e.connectClient(false, connect.WithProtoJSON())
	ctx := context.Background()
	cw, err := c.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: e.dir}))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(e.dir, "polled.txt"), []byte("x"), 0o644)
	var names []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && len(names) == 0 {
		res, err := c.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: cw.Msg.WatcherId}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range res.Msg.Events {
			names = append(names, ev.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(names) == 0 || names[0] != "polled.txt" {
		t.Fatalf("events %v", names)
	}
	if _, err := c.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: cw.Msg.WatcherId})); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: cw.Msg.WatcherId}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("removed watcher: %v", err)
	}
}

// A tenant's API key from the operator policy works as E2B_API_KEY, and
// its calls carry the tenant (so the controller scopes and admits them);
// a key that is neither the daemon's nor a tenant's is 401.
func TestTenantKeys(t *testing.T) {
	f, _ := newFake(t)
	const tenantKey = "acme-0123456789abcdef"
	h := New(f, Options{APIKey: testKey, Tenants: func(key string) (string, bool) {
		return "acme", key == tenantKey
	}})
	srv := httptest.NewServer(h.Wrap(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	e := &env{t: t, h: h, f: f, url: srv.URL}
	for _, c := range []struct {
		key, tenant string
		status      int
	}{
		{tenantKey, "acme", http.StatusCreated},
		{testKey, "", http.StatusCreated},
		{"acme-0123456789abcdeX", "", http.StatusUnauthorized},
	} {
		f.mu.Lock()
		f.callers = nil
		f.mu.Unlock()
		res := e.control(http.MethodPost, "/v2/sandboxes", `{"templateID":"base","timeout":60}`, c.key)
		res.Body.Close()
		f.mu.Lock()
		callers := f.callers
		f.mu.Unlock()
		if res.StatusCode != c.status {
			t.Fatalf("key %q: status %d, want %d", c.key, res.StatusCode, c.status)
		}
		if c.status == http.StatusCreated && (len(callers) != 1 || callers[0] != c.tenant) {
			t.Fatalf("key %q: backend saw tenants %q, want [%q]", c.key, callers, c.tenant)
		}
		if c.status != http.StatusCreated && len(callers) != 0 {
			t.Fatalf("key %q: refused, yet the backend was called", c.key)
		}
	}
}

// TestMetricsWindow (issue 12 item 23): getMetrics honours its start and
// end bounds (unix seconds), as E2B's API filters its samples.
func TestMetricsWindow(t *testing.T) {
	e := setup(t)
	get := func(q string) []metricBody {
		t.Helper()
		res := e.control(http.MethodGet, "/sandboxes/"+e.id+"/metrics"+q, "", testKey)
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("metrics%s: %d", q, res.StatusCode)
		}
		var out []metricBody
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	now := time.Now().Unix()
	first := get("")
	if len(first) != 1 || first[0].TimestampUnix < now-5 {
		t.Fatalf("unbounded: %+v", first)
	}
	if got := get(fmt.Sprintf("?end=%d", now-3600)); len(got) != 0 {
		t.Fatalf("a window that ended an hour ago: %+v", got)
	}
	if got := get(fmt.Sprintf("?start=%d", now+3600)); len(got) != 0 {
		t.Fatalf("a window that starts in an hour: %+v", got)
	}
	// A window over the present: the earlier sample and one taken now.
	got := get(fmt.Sprintf("?start=%d&end=%d", now-60, now+60))
	if len(got) != 2 || !got[0].Timestamp.Equal(first[0].Timestamp) || got[1].Timestamp.Before(got[0].Timestamp) {
		t.Fatalf("window over now: %+v", got)
	}
	// A past window holds what was sampled in it, without a new sample.
	if got := get(fmt.Sprintf("?start=%d&end=%d", now-60, first[0].TimestampUnix)); len(got) < 1 || !got[0].Timestamp.Equal(first[0].Timestamp) {
		t.Fatalf("past window: %+v", got)
	}
	for _, q := range []string{"?start=soon", "?end=-1", "?start=1.5"} {
		res := e.control(http.MethodGet, "/sandboxes/"+e.id+"/metrics"+q, "", testKey)
		if ae := decodeErr(t, res); res.StatusCode != http.StatusBadRequest || !strings.Contains(ae.Message, "unix time in seconds") {
			t.Fatalf("metrics%s: %d %+v", q, res.StatusCode, ae)
		}
	}
}
