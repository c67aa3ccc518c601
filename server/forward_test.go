package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

// fwdNode is one node of a two-node cluster of native API servers over
// fake backends, sharing one SQLite store (records, node entries and the
// journal).
type fwdNode struct {
	f     *fakeBackend
	execs atomic.Int64
	user  *httptest.Server
}

type placeTo string

func (p placeTo) Place(context.Context, api.CreateSandboxRequest) (string, error) {
	return string(p), nil
}

func fwdCluster(t *testing.T) (*sqlite.Store, map[string]*fwdNode) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	nodes := map[string]*fwdNode{}
	for _, name := range []string{"n1", "n2"} {
		n := &fwdNode{f: newFake()}
		n.f.execFn = func(ctx context.Context, sb string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
			n.execs.Add(1)
			io.WriteString(stdout, "ran on "+name)
			return api.ExitStatus{}, nil
		}
		fwd := forward.New(forward.Config{Self: name, Token: benchToken, Records: st, Nodes: st, Placer: placeTo("n2")})
		tenants := func(key string) (string, bool) { return strings.CutPrefix(key, "key-") }
		h := Guard(newServer(n.f, Options{APIKey: testKey, Journal: st, Forward: fwd, Tenants: tenants, Logf: t.Logf}), GuardOptions{})
		n.user = httptest.NewServer(h)
		t.Cleanup(n.user.Close)
		nodeL := httptest.NewServer(forward.NewReceiver(forward.ReceiverConfig{Token: benchToken, API: h}))
		t.Cleanup(nodeL.Close)
		if _, err := st.PutNode(context.Background(), store.Node{Name: name, Addr: nodeL.URL, StartedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		nodes[name] = n
	}
	return st, nodes
}

func call(t *testing.T, method, url, body string, hdr ...string) (int, string) {
	return callAs(t, testKey, method, url, body, hdr...)
}

func callAs(t *testing.T, key, method, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
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

// A keyed exec at a non-owner is journaled once, by the owner: the router
// runs before the route's journal (two nodes journaling one key in one
// store would make the owner's own record look like a retry in flight),
// and the retry replays the owner's answer without a second run.
func TestForwardBeforeJournal(t *testing.T) {
	st, nodes := fwdCluster(t)
	if _, err := st.Put(context.Background(), store.Sandbox{Name: "box", ID: "id-box", State: api.StateRunning, Owner: "n2"}); err != nil {
		t.Fatal(err)
	}
	u := nodes["n1"].user.URL + "/v1/sandboxes/box/exec"
	for i := 0; i < 2; i++ {
		code, body := call(t, "POST", u, `{"command":"true"}`, "Idempotency-Key", "k1")
		if code != 200 || !strings.Contains(body, "ran on n2") {
			t.Fatalf("exec %d: %d %s", i, code, body)
		}
	}
	if nodes["n1"].execs.Load() != 0 || nodes["n2"].execs.Load() != 1 {
		t.Fatalf("execs: n1 %d, n2 %d (want 0, 1: the retry replays)", nodes["n1"].execs.Load(), nodes["n2"].execs.Load())
	}
	j, err := st.Journal(context.Background(), "box")
	if err != nil || len(j) != 1 || j[0].Op != "exec" {
		t.Fatalf("journal: %+v %v", j, err)
	}
	// The key's scope is the caller's credential wherever it enters: the
	// same call straight at the owner replays too ...
	if code, body := call(t, "POST", nodes["n2"].user.URL+"/v1/sandboxes/box/exec", `{"command":"true"}`, "Idempotency-Key", "k1"); code != 200 || nodes["n2"].execs.Load() != 1 {
		t.Fatalf("direct retry at the owner: %d %s, %d execs", code, body, nodes["n2"].execs.Load())
	}
	// ... and another caller's same key through the same node is its own
	// call, never a replay of the first caller's answer (the forwarded
	// request carries no key; without the entry's fingerprint every
	// forwarded caller would share one scope).
	if code, body := callAs(t, "key-t1", "POST", u, `{"command":"true"}`, "Idempotency-Key", "k1"); code != 200 || nodes["n2"].execs.Load() != 2 {
		t.Fatalf("another caller's key k1: %d %s, %d execs (want 2: no replay)", code, body, nodes["n2"].execs.Load())
	}
	if code, _ := callAs(t, "key-t2", "POST", u, `{"command":"true"}`, "Idempotency-Key", "k1"); code != 200 || nodes["n2"].execs.Load() != 3 {
		t.Fatalf("a third caller's key k1: %d execs (want 3)", nodes["n2"].execs.Load())
	}
	// An invalid name is the route's 400 here, never a store lookup.
	if code, _ := call(t, "GET", nodes["n1"].user.URL+"/v1/sandboxes/Bad_Name", ""); code != http.StatusBadRequest {
		t.Fatalf("bad name: %d", code)
	}
}

// Creates are placed: POST /v1/sandboxes and a get-or-create of a new name
// go to the Placer's node with their body intact; a bad body is the entry
// node's own 400.
func TestForwardCreatePlaced(t *testing.T) {
	_, nodes := fwdCluster(t)
	code, body := call(t, "POST", nodes["n1"].user.URL+"/v1/sandboxes", `{"name":"new","image":"python"}`)
	if code != http.StatusCreated || nodes["n2"].f.lastCreate.Name != "new" || nodes["n2"].f.lastCreate.Image != "python" || nodes["n1"].f.lastCreate.Name != "" {
		t.Fatalf("create: %d %s; n2 got %+v", code, body, nodes["n2"].f.lastCreate)
	}
	code, _ = call(t, "PUT", nodes["n1"].user.URL+"/v1/sandboxes/other", `{"image":"node"}`)
	if code != http.StatusCreated || nodes["n2"].f.lastCreate.Name != "other" || nodes["n2"].f.lastCreate.Image != "node" {
		t.Fatalf("get-or-create: %d; n2 got %+v", code, nodes["n2"].f.lastCreate)
	}
	before := nodes["n2"].f.calls.Load()
	code, body = call(t, "POST", nodes["n1"].user.URL+"/v1/sandboxes", `{"name":"x","bogus":1}`)
	if code != http.StatusBadRequest || nodes["n2"].f.calls.Load() != before {
		t.Fatalf("bad body: %d %s", code, body)
	}
}

// A restore runs on the sandbox's owner, the one its body names: a
// restore through a non-owner is proxied with its body intact, never run
// at the entry. A restore for a sandbox with no record, or with a body
// that names none, is the entry's own answer (the route's 404 or 400).
func TestForwardRestoreToOwner(t *testing.T) {
	st, nodes := fwdCluster(t)
	if _, err := st.Put(context.Background(), store.Sandbox{Name: "box", ID: "id-box", State: api.StateRunning, Owner: "n2"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		n.f.mu.Lock()
		n.f.backups = map[string]api.Backup{"bk1": {ID: "bk1", Sandbox: "box", Dir: "/home/user"}}
		n.f.mu.Unlock()
	}
	code, body := call(t, "POST", nodes["n1"].user.URL+"/v1/backups/bk1/restore", `{"sandbox":"box","dir":"/home/user"}`)
	if code != http.StatusOK {
		t.Fatalf("restore through n1: %d %s", code, body)
	}
	if got := nodes["n2"].f.lastRestore; nodes["n2"].f.lastRestored != "bk1" || got.Sandbox != "box" || got.Dir != "/home/user" {
		t.Fatalf("n2 restored %q %+v, want bk1 into box", nodes["n2"].f.lastRestored, got)
	}
	if nodes["n1"].f.lastRestored != "" {
		t.Fatalf("n1 ran the restore of a sandbox n2 owns")
	}
	// Control: at the owner itself it runs there, as it always did.
	nodes["n2"].f.lastRestored = ""
	if code, body := call(t, "POST", nodes["n2"].user.URL+"/v1/backups/bk1/restore", `{"sandbox":"box"}`); code != http.StatusOK || nodes["n2"].f.lastRestored != "bk1" {
		t.Fatalf("restore at the owner: %d %s", code, body)
	}
	// No record: the entry answers (the fake has no such sandbox).
	call(t, "POST", nodes["n1"].user.URL+"/v1/backups/bk1/restore", `{"sandbox":"nobox"}`)
	if nodes["n2"].f.lastRestore.Sandbox == "nobox" || nodes["n1"].f.lastRestore.Sandbox != "nobox" {
		t.Fatalf("a restore into a sandbox without a record: n1 got %+v, n2 %+v; want n1's own answer", nodes["n1"].f.lastRestore, nodes["n2"].f.lastRestore)
	}
	if code, _ := call(t, "POST", nodes["n1"].user.URL+"/v1/backups/bk1/restore", `{"sandbox":"Bad_Name"}`); code != http.StatusBadRequest {
		t.Fatalf("bad sandbox name: %d, want 400", code)
	}
}
