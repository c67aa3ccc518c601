package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/server"
)

// egressFake adds the egress half of the backend to fake.
type egressFake struct {
	*fake
	policy  api.NetworkPolicy
	secrets map[string]string
}

func (f *egressFake) GetNetwork(ctx context.Context, name string) (api.NetworkPolicy, error) {
	return f.policy, nil
}

func (f *egressFake) SetNetwork(ctx context.Context, name string, p api.NetworkPolicy) (api.NetworkPolicy, error) {
	f.policy = p
	return p, nil
}

func (f *egressFake) EgressLog(ctx context.Context, name string, limit int) ([]api.EgressEvent, error) {
	return []api.EgressEvent{{Time: time.Now(), Kind: api.EgressTLS, Host: "other.test", IP: "203.0.113.20", Port: 443, Rule: "default"}}, nil
}

func (f *egressFake) SetSecret(ctx context.Context, name, value string) error {
	f.secrets[name] = value
	return nil
}

func (f *egressFake) ListSecrets(ctx context.Context) ([]api.Secret, error) {
	var out []api.Secret
	for n := range f.secrets {
		out = append(out, api.Secret{Name: n})
	}
	return out, nil
}

func (f *egressFake) DeleteSecret(ctx context.Context, name string) error {
	delete(f.secrets, name)
	return nil
}

func TestEgressCLI(t *testing.T) {
	c := newCLI(t)
	ef := &egressFake{fake: c.f, secrets: map[string]string{}}
	ts := httptest.NewServer(server.New(ef, server.Options{APIKey: "k"}))
	t.Cleanup(ts.Close)
	c.url = ts.URL

	code, _, errs := c.run("", "sandbox", "create", "a1", "--allow", "api.internal.test", "--deny", "*.bad.test",
		"--inject", "host=api.internal.test,header=Authorization,secret=gh,prefix=Bearer",
		"--inject", "host=api.internal.test,header=X-Note,value=a,b ${secret:gh}")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	n := c.f.created.Network
	if n == nil || n.Internet || n.Allow[0] != "api.internal.test" || n.Deny[0] != "*.bad.test" || len(n.Inject) != 1 ||
		n.Inject[0].SetHeaders["Authorization"] != "Bearer ${secret:gh}" || n.Inject[0].SetHeaders["X-Note"] != "a,b ${secret:gh}" {
		t.Fatalf("network policy %+v", n)
	}
	if code, _, errs := c.run("", "sandbox", "create", "a2", "--inject", "host=x.test,secret=a,value=b"); code == 0 || !strings.Contains(errs, "exactly one") {
		t.Fatalf("bad --inject: %d %q", code, errs)
	}
	if code, _, errs := c.run("tok\n", "secret", "set", "gh"); code != 0 || ef.secrets["gh"] != "tok" {
		t.Fatalf("secret set: %d %q %q", code, errs, ef.secrets)
	}
	if code, out, _ := c.run("", "secret", "ls"); code != 0 || !strings.Contains(out, "gh") || strings.Contains(out, "tok") {
		t.Fatalf("secret ls: %d %q", code, out)
	}
	if code, _, _ := c.run("", "secret", "rm", "gh"); code != 0 || len(ef.secrets) != 0 {
		t.Fatalf("secret rm: %d", code)
	}
	if code, out, errs := c.run("", "egress", "log", "a1"); code != 0 || !strings.Contains(out, "other.test") || !strings.Contains(out, "denied") {
		t.Fatalf("egress log: %d %q %q", code, out, errs)
	}
	if code, _, errs := c.run("", "egress", "set", "a1", "--internet", "--deny", "evil.test"); code != 0 || !ef.policy.Internet || ef.policy.Deny[0] != "evil.test" {
		t.Fatalf("egress set: %d %q %+v", code, errs, ef.policy)
	}
}
