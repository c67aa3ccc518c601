package e2b

import (
	"net/http/httptest"
	"testing"
)

// TestAppTraffic: requests for a user's server in a sandbox (by host name
// or by header) are app traffic; envd's and the interpreter's ports are not.
func TestAppTraffic(t *testing.T) {
	cases := []struct {
		host, id, port string
		want           bool
	}{
		{"localhost:7070", "", "", false},
		{"3000-abcdefghij0123456789.localhost:7070", "", "", true},
		{"49983-abcdefghij0123456789.localhost:7070", "", "", false},
		{"49999-abcdefghij0123456789.localhost", "", "", false},
		{"localhost", "abcdefghij0123456789", "", false},
		{"localhost", "abcdefghij0123456789", "8080", true},
		{"localhost", "abcdefghij0123456789", "49983", false},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "http://"+c.host+"/a//b", nil)
		if c.id != "" {
			r.Header.Set("E2b-Sandbox-Id", c.id)
		}
		if c.port != "" {
			r.Header.Set("E2b-Sandbox-Port", c.port)
		}
		if got := AppTraffic(r); got != c.want {
			t.Errorf("%+v: %v", c, got)
		}
	}
}
