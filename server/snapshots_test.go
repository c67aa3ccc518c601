package server

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
)

// Every malformed snapshot, fork or backup request is a 400 that names the
// problem, and never reaches the backend.
func TestSnapshotValidation(t *testing.T) {
	names := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = `"f` + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + `-` + string(rune('a'+i/26)) + `"`
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	many := func(n int, item string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
	}
	cases := []struct {
		name, method, path, body string
		msg                      string
	}{
		// snapshot create
		{"snap bad sandbox", "POST", "/v1/sandboxes/..%2Fx/snapshots", ``, "invalid sandbox name"},
		{"snap unknown field", "POST", "/v1/sandboxes/a/snapshots", `{"nmae":"x"}`, `unknown field "nmae"`},
		{"snap name uppercase", "POST", "/v1/sandboxes/a/snapshots", `{"name":"Base"}`, "invalid snapshot name"},
		{"snap name slash", "POST", "/v1/sandboxes/a/snapshots", `{"name":"a/b"}`, "invalid snapshot name"},
		{"snap name dotdot", "POST", "/v1/sandboxes/a/snapshots", `{"name":".."}`, "invalid snapshot name"},
		{"snap name leading dot", "POST", "/v1/sandboxes/a/snapshots", `{"name":".x"}`, "invalid snapshot name"},
		{"snap name 129", "POST", "/v1/sandboxes/a/snapshots", `{"name":"` + strings.Repeat("a", 129) + `"}`, "invalid snapshot name"},
		{"snap ttl garbage", "POST", "/v1/sandboxes/a/snapshots", `{"ttl":"forever"}`, "invalid ttl"},
		{"snap ttl too short", "POST", "/v1/sandboxes/a/snapshots", `{"ttl":"59s"}`, "invalid ttl"},
		{"snap ttl too long", "POST", "/v1/sandboxes/a/snapshots", `{"ttl":"8761h"}`, "invalid ttl"},
		{"snap ttl negative", "POST", "/v1/sandboxes/a/snapshots", `{"ttl":"-1h"}`, "invalid ttl"},
		{"snap trailing data", "POST", "/v1/sandboxes/a/snapshots", `{}{}`, "after the JSON object"},
		// snapshot ids and listing
		{"snap id dotdot", "GET", "/v1/snapshots/%2e%2e", ``, "invalid snapshot id"},
		{"snap id escaped slash", "GET", "/v1/snapshots/..%2Fetc", ``, "invalid snapshot id"},
		{"snap id uppercase", "DELETE", "/v1/snapshots/SNAP_1", ``, "invalid snapshot id"},
		{"snap id NUL", "DELETE", "/v1/snapshots/snap%00", ``, "invalid snapshot id"},
		{"snap id dash", "GET", "/v1/snapshots/snap-1", ``, "invalid snapshot id"},
		{"snap id 65", "GET", "/v1/snapshots/" + strings.Repeat("a", 65), ``, "invalid snapshot id"},
		{"list bad sandbox", "GET", "/v1/snapshots?sandbox=..%2Fx", ``, "invalid sandbox name"},
		{"list bad name", "GET", "/v1/snapshots?name=A%0A", ``, "invalid snapshot name"},
		// fork
		{"fork empty body", "POST", "/v1/sandboxes/a/fork", ``, "empty"},
		{"fork count 0", "POST", "/v1/sandboxes/a/fork", `{"count":0}`, "count must be between 1 and 100"},
		{"fork count missing", "POST", "/v1/sandboxes/a/fork", `{}`, "count must be between 1 and 100"},
		{"fork count 101", "POST", "/v1/sandboxes/a/fork", `{"count":101}`, "count must be between 1 and 100"},
		{"fork count negative", "POST", "/v1/sandboxes/a/fork", `{"count":-1}`, "count must be between"},
		{"fork count not a number", "POST", "/v1/sandboxes/a/fork", `{"count":"3"}`, `field "count"`},
		{"fork names too few", "POST", "/v1/sandboxes/a/fork", `{"count":3,"names":["x","y"]}`, "names has 2 entries but count is 3"},
		{"fork names too many", "POST", "/v1/sandboxes/a/fork", `{"count":1,"names":["x","y"]}`, "names has 2 entries but count is 1"},
		{"fork bad name", "POST", "/v1/sandboxes/a/fork", `{"count":2,"names":["x","../y"]}`, "names[1]"},
		{"fork duplicate name", "POST", "/v1/sandboxes/a/fork", `{"count":3,"names":["x","y","x"]}`, `"x" is given twice`},
		{"fork 101 names", "POST", "/v1/sandboxes/a/fork", `{"count":101,"names":` + names(101) + `}`, "count must be between"},
		{"fork unknown field", "POST", "/v1/sandboxes/a/fork", `{"count":1,"n":2}`, `unknown field "n"`},
		{"fork bad source", "POST", "/v1/sandboxes/A/fork", `{"count":1}`, "invalid sandbox name"},
		// backups
		{"backup missing dir", "POST", "/v1/sandboxes/a/backups", `{}`, "dir is required"},
		{"backup empty body", "POST", "/v1/sandboxes/a/backups", ``, "empty"},
		{"backup dir NUL", "POST", "/v1/sandboxes/a/backups", `{"dir":"/a\u0000"}`, "NUL"},
		{"backup dir too long", "POST", "/v1/sandboxes/a/backups", `{"dir":"/` + strings.Repeat("a", 4096) + `"}`, "max 4096"},
		{"backup name 257", "POST", "/v1/sandboxes/a/backups", `{"dir":"/w","name":"` + strings.Repeat("n", 257) + `"}`, "backup name"},
		{"backup name control", "POST", "/v1/sandboxes/a/backups", `{"dir":"/w","name":"a\nb"}`, "backup name"},
		{"backup bad ttl", "POST", "/v1/sandboxes/a/backups", `{"dir":"/w","ttl":"1y"}`, "invalid ttl"},
		{"backup too many excludes", "POST", "/v1/sandboxes/a/backups", `{"dir":"/w","exclude":` + many(257, `"*.o"`) + `}`, "257 patterns, max 256"},
		{"backup long exclude", "POST", "/v1/sandboxes/a/backups", `{"dir":"/w","exclude":["` + strings.Repeat("x", 1025) + `"]}`, "exclude[0] is 1025 bytes"},
		{"backup empty exclude", "POST", "/v1/sandboxes/a/backups", `{"dir":"/w","exclude":["a",""]}`, "exclude[1] is empty"},
		{"backup NUL exclude", "POST", "/v1/sandboxes/a/backups", `{"dir":"/w","exclude":["a\u0000"]}`, "exclude[0] contains a NUL"},
		{"backup newline exclude", "POST", "/v1/sandboxes/a/backups", `{"dir":"/w","exclude":["a\n!secret"]}`, "exclude[0] contains a newline"},
		{"backup unknown field", "POST", "/v1/sandboxes/a/backups", `{"dir":"/w","excludes":[]}`, `unknown field "excludes"`},
		{"backup gitignore not bool", "POST", "/v1/sandboxes/a/backups", `{"dir":"/w","gitignore":"yes"}`, `field "gitignore"`},
		{"backup bad sandbox", "POST", "/v1/sandboxes/a%2Fb/backups", `{"dir":"/w"}`, "invalid sandbox name"},
		{"backups list bad sandbox", "GET", "/v1/backups?sandbox=-a", ``, "invalid sandbox name"},
		{"backup id dotdot", "DELETE", "/v1/backups/%2e%2e", ``, "invalid backup id"},
		{"backup id slash", "DELETE", "/v1/backups/a%2Fb", ``, "invalid backup id"},
		{"restore bad id", "POST", "/v1/backups/a.b/restore", `{"sandbox":"x"}`, "invalid backup id"},
		{"restore missing sandbox", "POST", "/v1/backups/bak_1/restore", `{}`, "sandbox is required"},
		{"restore bad sandbox", "POST", "/v1/backups/bak_1/restore", `{"sandbox":"../x"}`, "invalid sandbox name"},
		{"restore dir NUL", "POST", "/v1/backups/bak_1/restore", `{"sandbox":"x","dir":"a\u0000"}`, "dir contains a NUL"},
		{"restore unknown field", "POST", "/v1/backups/bak_1/restore", `{"sandbox":"x","to":"/"}`, `unknown field "to"`},
		{"restore empty body", "POST", "/v1/backups/bak_1/restore", ``, "empty"},
		// create from a snapshot
		{"create bad snapshot id", "POST", "/v1/sandboxes", `{"name":"a","snapshot":"../snap"}`, "invalid snapshot id"},
		{"create bad persist", "POST", "/v1/sandboxes", `{"name":"a","persist":"s3"}`, "invalid persist"},
		{"put bad persist", "PUT", "/v1/sandboxes/a", `{"persist":"DISK"}`, "invalid persist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFake()
			ts := newTestServer(t, f, nil)
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			r := do(t, ts, c.method, c.path, body)
			if r.status != 400 {
				t.Fatalf("status %d, want 400: %s", r.status, r.body)
			}
			e := r.apiError(t)
			if e.Code != "invalid_argument" || !strings.Contains(e.Message, c.msg) {
				t.Fatalf("error %+v, want invalid_argument mentioning %q", e, c.msg)
			}
			if n := f.calls.Load(); n != 0 {
				t.Fatalf("rejected request reached the backend (%d calls)", n)
			}
		})
	}
}

// Negative control for the table above: the edge values it rejects just
// beyond are accepted, so the 400s come from the limits and not from a
// route that refuses everything.
func TestSnapshotValidationEdgesAccepted(t *testing.T) {
	f := newFake()
	f.boxes["a"] = api.Sandbox{Name: "a"}
	ts := newTestServer(t, f, nil)
	hundred := make([]string, 100)
	for i := range hundred {
		hundred[i] = "n" + strings.Repeat("x", i)[:i%60] + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	cases := []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/sandboxes/a/snapshots", `{"name":"` + "a" + strings.Repeat("._-9", 31) + `abc"}`, 201}, // 128 chars
		{"POST", "/v1/sandboxes/a/snapshots", `{"ttl":"1m"}`, 201},
		{"POST", "/v1/sandboxes/a/snapshots", `{"ttl":"8760h"}`, 201},
		{"POST", "/v1/sandboxes/a/fork", `{"count":1}`, 201},
		{"POST", "/v1/sandboxes/a/fork", string(mustJSON(t, api.ForkRequest{Count: 100, Names: hundred})), 201},
		{"POST", "/v1/sandboxes/a/backups", `{"dir":"project","name":"` + strings.Repeat("é", 256) + `","exclude":` + `["` + strings.Repeat("x", 1024) + `"]}`, 201},
		{"POST", "/v1/sandboxes", `{"name":"b","snapshot":"snap_0123abcd","persist":"disk"}`, 201},
		{"POST", "/v1/sandboxes", `{"name":"c","persist":"none"}`, 201},
		{"GET", "/v1/snapshots/" + strings.Repeat("a", 64), ``, 404},
	}
	for _, c := range cases {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		if r := do(t, ts, c.method, c.path, body); r.status != c.want {
			t.Errorf("%s %s %.80s: status %d, want %d: %s", c.method, c.path, c.body, r.status, c.want, r.body)
		}
	}
	if f.lastCreate.Snapshot != "" || f.lastCreate.Persist != "none" {
		t.Fatalf("create request reached the backend as %+v", f.lastCreate)
	}
}

func TestSnapshotRoutes(t *testing.T) {
	f := newFake()
	f.boxes["box"] = api.Sandbox{Name: "box"}
	ts := newTestServer(t, f, nil)

	// Create, with an optional body.
	r := do(t, ts, "POST", "/v1/sandboxes/box/snapshots", nil)
	if r.status != 201 {
		t.Fatalf("snapshot without body: %d %s", r.status, r.body)
	}
	r = do(t, ts, "POST", "/v1/sandboxes/box/snapshots", strings.NewReader(`{"name":"base-1.0","ttl":"72h"}`))
	var snap api.Snapshot
	if r.status != 201 || json.Unmarshal(r.body, &snap) != nil || snap.ID == "" || snap.Name != "base-1.0" {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	if f.lastSandbox != "box" || f.lastSnapReq != (api.SnapshotRequest{Name: "base-1.0", TTL: "72h"}) {
		t.Fatalf("backend saw %q %+v", f.lastSandbox, f.lastSnapReq)
	}
	if loc := r.header.Get("Location"); loc != "/v1/snapshots/"+snap.ID {
		t.Fatalf("Location %q", loc)
	}

	// Get, list with filters, delete.
	r = do(t, ts, "GET", "/v1/snapshots/"+snap.ID, nil)
	var got api.Snapshot
	if r.status != 200 || json.Unmarshal(r.body, &got) != nil || got.ID != snap.ID {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	r = do(t, ts, "GET", "/v1/snapshots?sandbox=box&name=base-1.0", nil)
	var list api.SnapshotList
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil || len(list.Snapshots) != 1 || list.Snapshots[0].ID != snap.ID {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if f.lastListSnap != [2]string{"box", "base-1.0"} {
		t.Fatalf("list filter %q", f.lastListSnap)
	}
	if r := do(t, ts, "DELETE", "/v1/snapshots/"+snap.ID, nil); r.status != 204 || len(r.body) != 0 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}

	// Backend NotFound → 404 with the backend's message.
	for _, p := range []struct{ method, path string }{
		{"GET", "/v1/snapshots/" + snap.ID},
		{"DELETE", "/v1/snapshots/" + snap.ID},
	} {
		r := do(t, ts, p.method, p.path, nil)
		if r.status != 404 {
			t.Fatalf("%s %s again: %d %s", p.method, p.path, r.status, r.body)
		}
		if e := r.apiError(t); e.Code != "not_found" || e.Message != "snapshot "+snap.ID+" not found" {
			t.Fatalf("%s %s: error %+v", p.method, p.path, e)
		}
	}
	r = do(t, ts, "POST", "/v1/sandboxes/nobox/snapshots", nil)
	if r.status != 404 || r.apiError(t).Message != `sandbox "nobox" not found` {
		t.Fatalf("snapshot of a missing sandbox: %d %s", r.status, r.body)
	}
}

func TestForkRoute(t *testing.T) {
	f := newFake()
	f.boxes["src"] = api.Sandbox{Name: "src"}
	ts := newTestServer(t, f, nil)
	r := do(t, ts, "POST", "/v1/sandboxes/src/fork", strings.NewReader(`{"count":2,"names":["w1","w2"]}`))
	var res api.ForkResult
	if r.status != 201 || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	if len(res.Sandboxes) != 2 || res.Sandboxes[0].Name != "w1" || res.Sandboxes[1].Name != "w2" || res.Snapshot.ID == "" {
		t.Fatalf("result %+v", res)
	}
	if f.lastSandbox != "src" || f.lastFork.Count != 2 {
		t.Fatalf("backend saw %q %+v", f.lastSandbox, f.lastFork)
	}
	r = do(t, ts, "POST", "/v1/sandboxes/gone/fork", strings.NewReader(`{"count":1}`))
	if r.status != 404 || r.apiError(t).Code != "not_found" {
		t.Fatalf("fork of a missing sandbox: %d %s", r.status, r.body)
	}
}

func TestBackupRoutes(t *testing.T) {
	f := newFake()
	ts := newTestServer(t, f, nil)
	r := do(t, ts, "POST", "/v1/sandboxes/box/backups", strings.NewReader(`{"dir":"/home/user/p","name":"nightly","ttl":"24h","exclude":["node_modules","*.o"],"gitignore":true}`))
	var b api.Backup
	if r.status != 201 || json.Unmarshal(r.body, &b) != nil || b.ID == "" {
		t.Fatalf("backup: %d %s", r.status, r.body)
	}
	want := api.BackupRequest{Dir: "/home/user/p", Name: "nightly", TTL: "24h", Exclude: []string{"node_modules", "*.o"}, Gitignore: true}
	if got := f.lastBackup; f.lastSandbox != "box" || got.Dir != want.Dir || got.Name != want.Name || got.TTL != want.TTL || !got.Gitignore || strings.Join(got.Exclude, ",") != "node_modules,*.o" {
		t.Fatalf("backend saw %q %+v", f.lastSandbox, got)
	}

	r = do(t, ts, "GET", "/v1/backups?sandbox=box", nil)
	var list api.BackupList
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil || len(list.Backups) != 1 || f.lastSandbox != "box" {
		t.Fatalf("list: %d %s", r.status, r.body)
	}

	r = do(t, ts, "POST", "/v1/backups/"+b.ID+"/restore", strings.NewReader(`{"sandbox":"other","dir":"restored"}`))
	var rr api.RestoreBackupResult
	if r.status != 200 || json.Unmarshal(r.body, &rr) != nil || rr.Dir != "restored" || rr.Files != 3 {
		t.Fatalf("restore: %d %s", r.status, r.body)
	}
	if f.lastRestored != b.ID || f.lastRestore != (api.RestoreBackupRequest{Sandbox: "other", Dir: "restored"}) {
		t.Fatalf("backend saw %q %+v", f.lastRestored, f.lastRestore)
	}

	if r := do(t, ts, "DELETE", "/v1/backups/"+b.ID, nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	r = do(t, ts, "DELETE", "/v1/backups/"+b.ID, nil)
	if r.status != 404 || r.apiError(t).Message != "backup "+b.ID+" not found" {
		t.Fatalf("delete again: %d %s", r.status, r.body)
	}
	r = do(t, ts, "POST", "/v1/backups/"+b.ID+"/restore", strings.NewReader(`{"sandbox":"other"}`))
	if r.status != 404 || r.apiError(t).Code != "not_found" {
		t.Fatalf("restore of a deleted backup: %d %s", r.status, r.body)
	}
}

func TestEmptySnapshotListsAreArrays(t *testing.T) {
	ts := newTestServer(t, newFake(), nil)
	for _, p := range []string{"/v1/snapshots", "/v1/backups"} {
		r := do(t, ts, "GET", p, nil)
		if r.status != 200 || !strings.Contains(string(r.body), "[]") {
			t.Fatalf("%s: %d %s", p, r.status, r.body)
		}
	}
}
