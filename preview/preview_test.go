package preview_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/preview"
)

const tok = "abcdefghij012345"

func TestParseLabel(t *testing.T) {
	good := []struct {
		label, sandbox string
		port           int
	}{
		{"8080-box-" + tok, "box", 8080},
		{"3000-my-dev-box-2-" + tok, "my-dev-box-2", 3000},
		{"1-a-" + tok, "a", 1},
		{"65535-0-" + tok, "0", 65535},
		{"80-x--y-" + tok, "x--y", 80},
	}
	for _, g := range good {
		port, sb, tk, err := preview.ParseLabel(g.label)
		if err != nil || port != g.port || sb != g.sandbox || tk != tok {
			t.Errorf("%q: %d %q %q %v", g.label, port, sb, tk, err)
		}
	}
	for _, bad := range []string{
		"", "8080", "8080-" + tok, "8080--" + tok, "-box-" + tok, "0-box-" + tok, "08080-box-" + tok,
		"65536-box-" + tok, "+80-box-" + tok, "80-box-" + tok[:7], "80-box-" + tok + tok + "0", "80-box-abc_defgh", "80-box-ABCDEFGHIJ012345",
		"80-Box-" + tok, "80--box-" + tok, "80-box_1-" + tok, "80-b.x-" + tok, "80-" + strings.Repeat("a", 64) + "-" + tok,
	} {
		if _, _, _, err := preview.ParseLabel(bad); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%q: err = %v, want not found", bad, err)
		}
	}
}

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 2000; i++ {
		tk := preview.NewToken()
		if !preview.ValidToken(tk) {
			t.Fatalf("invalid token %q", tk)
		}
		if seen[tk] {
			t.Fatalf("duplicate token %q", tk)
		}
		seen[tk] = true
	}
	if preview.ValidToken("abcdefghij01234!") || preview.ValidToken("short") {
		t.Fatal("ValidToken accepts garbage")
	}
}

// TestCheckToken (issue 12 item 14): a caller's token is 8 to 32
// characters from [a-z0-9]; anything else is invalid argument naming the
// rule.
func TestCheckToken(t *testing.T) {
	for _, ok := range []string{"abcdefgh", "devpreview01", strings.Repeat("z9", 16)} {
		if err := preview.CheckToken(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
		if _, _, tk, err := preview.ParseLabel("8000-box-" + ok); err != nil || tk != ok {
			t.Errorf("label with token %q: %q %v", ok, tk, err)
		}
	}
	for _, bad := range []string{"", "abcdefg", strings.Repeat("a", 33), "Abcdefgh", "abcd-efgh", "abcd_efgh", "abcdefg.", "abcdéfgh"} {
		err := preview.CheckToken(bad)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "8 to 32 characters from [a-z0-9]") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestURLs(t *testing.T) {
	e := preview.Exposure{Sandbox: "my-box", Port: 8080, Token: tok}
	if got := preview.URL(preview.Config{PublicHost: "localhost:7080"}, e); got != "http://8080-my-box-"+tok+".localhost:7080/" {
		t.Errorf("URL = %q", got)
	}
	if got := preview.URL(preview.Config{PublicHost: "preview.example.com", Scheme: "https"}, e); got != "https://8080-my-box-"+tok+".preview.example.com/" {
		t.Errorf("URL = %q", got)
	}
	if got := preview.PathURL("http://127.0.0.1:7070/", e); got != "http://127.0.0.1:7070/preview/8080-my-box-"+tok+"/" {
		t.Errorf("PathURL = %q", got)
	}
}

func TestHostRoutingWithDashedNames(t *testing.T) {
	e := newEnv(t, nil)
	a := e.expose("my-dev-box-2", 8080, echoUpstream(t, "a"), false)
	b := e.expose("my-dev", 8080, echoUpstream(t, "b"), false)
	c := e.expose("my-dev-box-2", 3000, echoUpstream(t, "c"), false)
	for _, tc := range []struct {
		exp  preview.Exposure
		want string
	}{{a, "a"}, {b, "b"}, {c, "c"}} {
		s := decodeSeen(t, e.get(e.url(tc.exp)+"some/path?x=1&y=%2F", "X-Forwarded-Prefix", "/evil", "X-Forwarded-Host", "evil.example"))
		if s.Service != tc.want {
			t.Fatalf("%s routed to service %q, want %q", e.url(tc.exp), s.Service, tc.want)
		}
		wantHost := preview.Label(tc.exp) + "." + e.cfg.PublicHost
		if s.Path != "/some/path" || s.Query != "x=1&y=%2F" || s.Host != wantHost {
			t.Errorf("upstream saw %+v", s)
		}
		if s.Header.Get("X-Forwarded-Host") != wantHost || s.Header.Get("X-Forwarded-Proto") != "http" ||
			s.Header.Get("X-Forwarded-For") != "127.0.0.1" || s.Header.Get("X-Forwarded-Prefix") != "" {
			t.Errorf("forwarding headers: %v", s.Header)
		}
	}
	// Upper case and a trailing dot name the same host.
	up := strings.Replace(e.url(a), "localhost", "LocalHost.", 1)
	if s := decodeSeen(t, e.get(up)); s.Service != "a" {
		t.Errorf("case-insensitive host routed to %q", s.Service)
	}
}

func TestSchemeSetsForwardedProto(t *testing.T) {
	e := newEnv(t, func(c *preview.Config) { c.Scheme = "https" })
	exp := e.expose("box", 80, echoUpstream(t, "a"), false)
	req, _ := http.NewRequest("GET", strings.Replace(e.url(exp), "https:", "http:", 1), nil)
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if s := decodeSeen(t, resp); s.Header.Get("X-Forwarded-Proto") != "https" {
		t.Errorf("X-Forwarded-Proto = %q", s.Header.Get("X-Forwarded-Proto"))
	}
}

func TestPathForm(t *testing.T) {
	e := newEnv(t, nil)
	svc := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/go" {
			http.Redirect(w, r, "/login?next=1", http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"Service":"p","Path":"` + r.URL.Path + `","RawPath":"` + r.URL.RawPath + `","Query":"` + r.URL.RawQuery + `","Header":{"X-Forwarded-Prefix":["` + r.Header.Get("X-Forwarded-Prefix") + `"]}}`))
	}))
	exp := e.expose("my-box", 5173, svc, false)
	prefix := "/preview/" + preview.Label(exp)

	// On the preview listener's own host name.
	s := decodeSeen(t, e.get(e.pathURL(exp)+"a/b%2Fc?q=1"))
	if s.Path != "/a/b/c" || s.RawPath != "/a/b%2Fc" || s.Query != "q=1" || s.Header.Get("X-Forwarded-Prefix") != prefix {
		t.Errorf("upstream saw %+v", s)
	}
	// Without the trailing slash: a redirect to the canonical form.
	resp := e.get(strings.TrimSuffix(e.pathURL(exp), "/") + "?z=2")
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != prefix+"/?z=2" {
		t.Errorf("no-slash: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The service's absolute-path redirects stay under the prefix.
	resp = e.get(e.pathURL(exp) + "go")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != prefix+"/login?next=1" {
		t.Errorf("redirect: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// PathHandler works on any host (say the API listener), and 404s
	// what is not a preview path.
	api := httptest.NewServer(e.p.PathHandler())
	defer api.Close()
	r2, err := http.Get(preview.PathURL(api.URL, exp) + "x")
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	if s := decodeSeen(t, r2); s.Path != "/x" {
		t.Errorf("PathHandler: upstream saw %+v", s)
	}
	r3, err := http.Get(api.URL + "/v1/sandboxes")
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Body.Close()
	decodeError(t, r3, http.StatusNotFound, "not_found")
}

func TestUnknownIs404AndNeverDials(t *testing.T) {
	e := newEnv(t, nil)
	exp := e.expose("box", 8080, echoUpstream(t, "a"), false)
	wrong := exp
	wrong.Token = "zzzzzzzzzzzzzzzz"
	other := exp
	other.Port = 8081
	for _, u := range []string{
		e.url(wrong), e.url(other), e.pathURL(wrong),
		"http://8080-box.localhost/",                 // not a label
		"http://unrelated.example/",                  // not our host
		"http://a.8080-box-" + tok + ".localhost:1/", // two labels
		e.srv.URL + "/",                              // bare public host, not /preview/
	} {
		decodeError(t, e.get(u), http.StatusNotFound, "not_found")
	}
	if _, dials := e.res.counts(); dials != 0 {
		t.Fatalf("%d tunnels opened for unknown URLs", dials)
	}
	// Control: the right URL works.
	if s := decodeSeen(t, e.get(e.url(exp))); s.Service != "a" {
		t.Fatal("control failed")
	}
}

// A URL from an earlier run answers 410 and must not touch the sandbox
// (the Resolver does not wake it, and no tunnel is opened).
func TestStaleIs410AndDoesNotDial(t *testing.T) {
	e := newEnv(t, nil)
	exp := e.expose("box", 8080, echoUpstream(t, "a"), false)
	e.setStale(exp)
	er := decodeError(t, e.get(e.url(exp)), http.StatusGone, "stale_preview_url")
	if !strings.Contains(er.Message, "earlier run") {
		t.Errorf("message %q", er.Message)
	}
	decodeError(t, e.get(e.pathURL(exp)), http.StatusGone, "stale_preview_url")
	if _, dials := e.res.counts(); dials != 0 {
		t.Fatalf("stale URL opened %d tunnels", dials)
	}
}

func TestPrivateMode(t *testing.T) {
	e := newEnv(t, nil)
	exp := e.expose("box", 8080, echoUpstream(t, "a"), true)
	resp := e.get(e.url(exp))
	decodeError(t, resp, http.StatusUnauthorized, "unauthenticated")
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	decodeError(t, e.get(e.url(exp), "Authorization", "Bearer wrong"), http.StatusUnauthorized, "unauthenticated")
	decodeError(t, e.get(e.url(exp), "Authorization", "Basic "+testKey), http.StatusUnauthorized, "unauthenticated")
	if _, dials := e.res.counts(); dials != 0 {
		t.Fatalf("unauthenticated requests opened %d tunnels", dials)
	}
	s := decodeSeen(t, e.get(e.url(exp), "Authorization", "Bearer "+testKey))
	if v := s.Header.Values("Authorization"); len(v) != 0 {
		t.Fatalf("berth's API key reached the sandbox: %q", v)
	}
	s = decodeSeen(t, e.get(e.pathURL(exp), "Authorization", "bearer  "+testKey+" "))
	if v := s.Header.Values("Authorization"); len(v) != 0 {
		t.Fatalf("path form: Authorization reached the sandbox: %q", v)
	}
}

// In public mode an app's own Authorization passes through (this is also
// the control that shows the probe above can see the header), but berth's
// key is removed even there.
func TestPublicModeAuthorization(t *testing.T) {
	e := newEnv(t, nil)
	exp := e.expose("box", 8080, echoUpstream(t, "a"), false)
	s := decodeSeen(t, e.get(e.url(exp), "Authorization", "Basic dXNlcjpwdw=="))
	if s.Header.Get("Authorization") != "Basic dXNlcjpwdw==" {
		t.Fatalf("app's Authorization not forwarded: %v", s.Header)
	}
	s = decodeSeen(t, e.get(e.url(exp), "Authorization", "Bearer "+testKey))
	if v := s.Header.Values("Authorization"); len(v) != 0 {
		t.Fatalf("berth's API key reached a public sandbox service: %q", v)
	}
}

// With no API key configured, private URLs fail closed.
func TestPrivateWithoutConfiguredKeyFailsClosed(t *testing.T) {
	e := newEnv(t, func(c *preview.Config) { c.APIKey = "" })
	exp := e.expose("box", 8080, echoUpstream(t, "a"), true)
	for _, h := range []string{"", "Bearer ", "Bearer x"} {
		decodeError(t, e.get(e.url(exp), "Authorization", h), http.StatusUnauthorized, "unauthenticated")
	}
}

func TestDialFailures(t *testing.T) {
	e := newEnv(t, func(c *preview.Config) { c.DialTimeout = 50 * 1e6 }) // 50 ms
	exp := e.expose("box", 8080, "", false)

	e.setDial(exp, func(context.Context) (net.Conn, error) {
		return nil, errdefs.Unavailable("nothing is listening on port 8080 in the sandbox")
	})
	er := decodeError(t, e.get(e.url(exp)), http.StatusBadGateway, "unavailable")
	if er.Message != "nothing is listening on port 8080 in the sandbox" {
		t.Errorf("message %q", er.Message)
	}

	e.setDial(exp, func(context.Context) (net.Conn, error) { return nil, errors.New("boom") })
	er = decodeError(t, e.get(e.url(exp)), http.StatusBadGateway, "unavailable")
	if !strings.Contains(er.Message, "boom") || strings.Contains(er.Message, exp.Token) {
		t.Errorf("message %q (must explain and must not echo the token)", er.Message)
	}

	// A dial that hangs is cut at DialTimeout.
	e.setDial(exp, func(ctx context.Context) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	decodeError(t, e.get(e.url(exp)), http.StatusGatewayTimeout, "deadline_exceeded")
	if n := e.p.OpenTunnels("box"); n != 0 {
		t.Errorf("%d tunnels counted after failed dials", n)
	}
}

// A sandbox service must not set cookies for other sandboxes' previews.
func TestCookiesConfinedToThePreview(t *testing.T) {
	e := newEnv(t, nil)
	svc := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "a=1; Domain=localhost; Path=/app; HttpOnly")
		w.Header().Add("Set-Cookie", "b=2;domain=.LOCALHOST;Secure")
		w.Header().Add("Set-Cookie", "c=3")
	}))
	exp := e.expose("box", 8080, svc, false)
	got := e.get(e.url(exp)).Header.Values("Set-Cookie")
	want := []string{"a=1; Path=/app; HttpOnly", "b=2;Secure", "c=3"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("host form Set-Cookie = %q, want %q", got, want)
	}
	prefix := "/preview/" + preview.Label(exp)
	got = e.get(e.pathURL(exp)).Header.Values("Set-Cookie")
	want = []string{"a=1; Path=" + prefix + "/app; HttpOnly", "b=2;Secure", "c=3"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("path form Set-Cookie = %q, want %q", got, want)
	}
}
