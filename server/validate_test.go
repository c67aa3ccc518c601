package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
)

func TestValidation(t *testing.T) {
	nested := func(open, close string, depth int) string {
		return `{"env":` + strings.Repeat(open, depth) + strings.Repeat(close, depth) + `}`
	}
	bigBody := `{"name":"box","image":"` + strings.Repeat("a", 2<<20) + `"}`
	longPath := "/" + strings.Repeat("a", 5000)
	cases := []struct {
		name, method, path, body string
		status                   int
		msg                      string // substring of the error message
	}{
		{"malformed JSON", "POST", "/v1/sandboxes", `{"name":"a",}`, 400, "malformed JSON"},
		{"truncated JSON", "POST", "/v1/sandboxes", `{"name":`, 400, "truncated"},
		{"empty body on create", "POST", "/v1/sandboxes", ``, 400, "empty"},
		{"unknown field", "POST", "/v1/sandboxes", `{"name":"a","nmae":"b"}`, 400, `unknown field "nmae"`},
		{"trailing data", "POST", "/v1/sandboxes", `{"name":"a"}{"name":"b"}`, 400, "after the JSON object"},
		{"trailing garbage", "POST", "/v1/sandboxes", `{"name":"a"} x`, 400, "after the JSON object"},
		{"wrong type", "POST", "/v1/sandboxes", `{"name":5}`, 400, `field "name": expected a JSON string`},
		{"array body", "POST", "/v1/sandboxes", `[]`, 400, "JSON object"},
		{"2 MB body", "POST", "/v1/sandboxes", bigBody, 413, "limit"},
		{"deeply nested arrays", "POST", "/v1/sandboxes", nested("[", "]", 200000), 400, ""},
		{"deeply nested objects", "POST", "/v1/sandboxes", nested(`{"a":`, "}", 100000), 400, ""},
		{"nested under unknown field", "POST", "/v1/sandboxes", `{"x":` + strings.Repeat("[", 300000) + `}`, 400, ""},
		{"name with ../", "POST", "/v1/sandboxes", `{"name":"../etc"}`, 400, "invalid sandbox name"},
		{"name with NUL", "POST", "/v1/sandboxes", `{"name":"a\u0000b"}`, 400, "invalid sandbox name"},
		{"name with newline", "POST", "/v1/sandboxes", `{"name":"a\nb"}`, 400, "invalid sandbox name"},
		{"name uppercase", "POST", "/v1/sandboxes", `{"name":"Box"}`, 400, "invalid sandbox name"},
		{"name leading dash", "POST", "/v1/sandboxes", `{"name":"-box"}`, 400, "invalid sandbox name"},
		{"name too long", "POST", "/v1/sandboxes", `{"name":"` + strings.Repeat("a", 64) + `"}`, 400, "invalid sandbox name"},
		{"name empty", "POST", "/v1/sandboxes", `{}`, 400, "invalid sandbox name"},
		{"negative memory", "POST", "/v1/sandboxes", `{"name":"a","resources":{"memoryMib":-1}}`, 400, "memoryMib"},
		{"overflowing disk", "POST", "/v1/sandboxes", `{"name":"a","resources":{"diskMb":99999999999999999999}}`, 400, "diskMb"},
		{"bad sleepAfter", "POST", "/v1/sandboxes", `{"name":"a","sleepAfter":"soon"}`, 400, "sleepAfter"},
		{"negative sleepAfter", "POST", "/v1/sandboxes", `{"name":"a","sleepAfter":"-1m"}`, 400, "sleepAfter"},
		{"bad env key", "POST", "/v1/sandboxes", `{"name":"a","env":{"A=B":"c"}}`, 400, "invalid variable name"},
		{"bad label key", "POST", "/v1/sandboxes", `{"name":"a","labels":{"../x":"c"}}`, 400, "label key"},
		{"image with space", "POST", "/v1/sandboxes", `{"name":"a","image":"debian; rm -rf /"}`, 400, "image"},
		{"path name ../ escaped", "GET", "/v1/sandboxes/..%2Fetc", ``, 400, "invalid sandbox name"},
		{"path name NUL", "GET", "/v1/sandboxes/a%00b", ``, 400, "invalid sandbox name"},
		{"path name control char", "DELETE", "/v1/sandboxes/a%0Ab", ``, 400, "invalid sandbox name"},
		{"path name dotdot", "POST", "/v1/sandboxes/%2e%2e/exec", `{"command":"id"}`, 400, "invalid sandbox name"},
		{"put name ../ escaped", "PUT", "/v1/sandboxes/..%2F..%2Fetc", ``, 400, "invalid sandbox name"},
		{"exec argv and command", "POST", "/v1/sandboxes/a/exec", `{"argv":["ls"],"command":"ls"}`, 400, "not both"},
		{"exec nothing", "POST", "/v1/sandboxes/a/exec", `{}`, 400, "needs argv"},
		{"exec NUL in argv", "POST", "/v1/sandboxes/a/exec", `{"argv":["ls","a\u0000"]}`, 400, "NUL"},
		{"exec negative timeout", "POST", "/v1/sandboxes/a/exec", `{"command":"ls","timeoutMs":-5}`, 400, "timeoutMs"},
		{"exec cwd NUL", "POST", "/v1/sandboxes/a/exec", `{"command":"ls","cwd":"/a\u0000"}`, 400, "cwd"},
		{"exec stdin not base64", "POST", "/v1/sandboxes/a/exec", `{"command":"cat","stdin":"!!"}`, 400, ""},
		{"files path missing", "GET", "/v1/sandboxes/a/files/stat", ``, 400, "path is required"},
		{"files path empty", "GET", "/v1/sandboxes/a/files/stat?path=", ``, 400, "path is empty"},
		{"files path NUL", "GET", "/v1/sandboxes/a/files/content?path=/etc/x%00y", ``, 400, "NUL"},
		{"files path not UTF-8", "GET", "/v1/sandboxes/a/files?path=/%ff", ``, 400, "UTF-8"},
		{"files path too long", "GET", "/v1/sandboxes/a/files/exists?path=" + longPath, ``, 400, "max 4096"},
		{"recursive not bool", "GET", "/v1/sandboxes/a/files?path=/&recursive=maybe", ``, 400, "recursive"},
		{"upload bad mode", "PUT", "/v1/sandboxes/a/files/content?path=/x&mode=999", `x`, 400, "mode"},
		{"upload mode too big", "PUT", "/v1/sandboxes/a/files/content?path=/x&mode=17777", `x`, 400, "mode"},
		{"mkdir bad mode", "POST", "/v1/sandboxes/a/files/mkdir", `{"path":"/x","mode":70000}`, 400, "mode"},
		{"rename empty to", "POST", "/v1/sandboxes/a/files/rename", `{"from":"/x"}`, 400, "to is empty"},
		{"bad state", "GET", "/v1/sandboxes?state=zombie", ``, 400, "state"},
		{"bad label filter", "GET", "/v1/sandboxes?label=novalue", ``, 400, "key=value"},
		{"pull empty ref", "POST", "/v1/images/pull", `{"ref":""}`, 400, "ref is empty"},
		{"import bad name", "POST", "/v1/images/import?name=a%0Ab", `x`, 400, "name"},
		{"start neither", "POST", "/v1/sandboxes", `{"name":"a","start":{}}`, 400, "start: give"},
		{"start both", "POST", "/v1/sandboxes", `{"name":"a","start":{"image":true,"command":"x"}}`, 400, "not both"},
		{"start blank command", "POST", "/v1/sandboxes", `{"name":"a","start":"  "}`, 400, "start.command is blank"},
		{"start unknown field", "POST", "/v1/sandboxes", `{"name":"a","start":{"comand":"x"}}`, 400, "comand"},
		{"start bad cwd", "POST", "/v1/sandboxes", `{"name":"a","start":{"command":"x","cwd":"/a\u0000b"}}`, 400, "start.cwd"},
		{"start bad env", "POST", "/v1/sandboxes", `{"name":"a","start":{"command":"x","env":{"1x":"y"}}}`, 400, "start.env"},
		{"start ready two probes", "POST", "/v1/sandboxes", `{"name":"a","start":{"image":true,"ready":{"port":{"port":80},"log":{"pattern":"x"}}}}`, 400, "exactly one of port, log and command"},
		{"start ready bad port", "POST", "/v1/sandboxes", `{"name":"a","start":{"image":true,"ready":{"port":{"port":70000}}}}`, 400, "start.ready: port must be"},
		{"start ready bad regex", "POST", "/v1/sandboxes", `{"name":"a","start":{"image":true,"ready":{"log":{"pattern":"(","regex":true}}}}`, 400, "RE2"},
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
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			e := r.apiError(t)
			if !strings.Contains(e.Message, c.msg) {
				t.Fatalf("message %q does not mention %q", e.Message, c.msg)
			}
			if c.status == 400 || c.status == 413 {
				if e.Code != "invalid_argument" {
					t.Fatalf("code %q, want invalid_argument", e.Code)
				}
			}
			if n := f.calls.Load(); n != 0 {
				t.Fatalf("rejected request reached the backend (%d calls)", n)
			}
		})
	}
}

func TestValidNamesAccepted(t *testing.T) {
	for _, n := range []string{"a", "0", "agent-session-47", strings.Repeat("a", 63), "a-"} {
		if err := ValidateSandboxName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
}

// FuzzDecodeCreate feeds arbitrary bodies to the create decoder. Whatever
// it accepts must be a request the rest of berth can trust: a valid name,
// bounded maps, a parseable sleepAfter. Run the seeds with go test; explore
// with go test -fuzz=FuzzDecodeCreate ./server.
func FuzzDecodeCreate(f *testing.F) {
	for _, seed := range []string{
		`{"name":"box"}`,
		`{"name":"box","image":"node","instance":"lite","resources":{"vcpu":0.25,"memoryMib":256,"diskMb":2000},"internet":true,"env":{"A":"b"},"labels":{"team":"x"},"sleepAfter":"10m","keepAlive":false}`,
		`{"name":"../x"}`,
		`{"name":"a","env":{"":"x"}}`,
		`{"name":"a"} {}`,
		`[[[[[[`,
		`{"name":"a","resources":{"vcpu":1e400}}`,
		"{\"name\":\"a\xff\"}",
		``,
	} {
		f.Add([]byte(seed))
	}
	nameRE := regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := parseCreate(bytes.NewReader(data), "", false)
		if err != nil {
			return
		}
		if !nameRE.MatchString(req.Name) {
			t.Fatalf("accepted invalid name %q", req.Name)
		}
		if len(req.Env) > maxEnv || len(req.Labels) > maxLabels {
			t.Fatalf("accepted unbounded maps")
		}
		if r := req.Resources; r != nil && (r.VCPU < 0 || r.MemoryMiB < 0 || r.DiskMB < 0) {
			t.Fatalf("accepted negative resources %+v", r)
		}
		// An accepted request must survive a round trip unchanged in
		// meaning: re-decoding what we would send onwards succeeds.
		if _, err := parseCreate(bytes.NewReader(mustJSON(t, req)), "", false); err != nil {
			t.Fatalf("accepted %q but rejected its re-encoding: %v", data, err)
		}
	})
}

// Pushing images is the operator's: a tenant key gets 403 before the
// pusher is called; the operator's key reaches it (the control).
func TestPushImageIsTheOperators(t *testing.T) {
	var calls int
	s := newServer(newFake(), Options{APIKey: testKey, Logf: t.Logf,
		Tenants: func(k string) (string, bool) { return "acme", k == "tenant-secret-key" },
		Pushes:  pushFunc(func() { calls++ })})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	body := `{"image":"app","ref":"127.0.0.1:5000/app:v1"}`
	for key, want := range map[string]int{"tenant-secret-key": 403, testKey: 200} {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/images/push", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("key %s: status %d, want %d", key, res.StatusCode, want)
		}
	}
	if calls != 1 {
		t.Fatalf("the pusher was called %d times, want once (the operator's)", calls)
	}
}

type pushFunc func()

func (f pushFunc) PushImage(context.Context, api.PushRequest, func(api.Progress)) (api.Image, error) {
	f()
	return api.Image{Digest: "sha256:" + strings.Repeat("a", 64)}, nil
}
