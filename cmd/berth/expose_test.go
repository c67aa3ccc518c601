package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/server"
)

type portsFake struct {
	*fake
	got api.ExposePortRequest
}

func (f *portsFake) ExposePort(ctx context.Context, name string, req api.ExposePortRequest) (api.ExposedPort, error) {
	f.got = req
	return api.ExposedPort{Port: req.Port, URL: "http://8000-" + name + "-" + req.Token + ".localhost/"}, nil
}

// TestExposeTokenFlag (issue 12 item 14): berth expose --token sends the
// caller's token.
func TestExposeTokenFlag(t *testing.T) {
	c := newCLI(t)
	pf := &portsFake{fake: c.f}
	ts := httptest.NewServer(server.New(pf, server.Options{APIKey: "k"}))
	t.Cleanup(ts.Close)
	c.url = ts.URL
	code, out, errs := c.run("", "expose", "dev", "8000", "--token", "devpreview01", "--private")
	if code != 0 || pf.got.Token != "devpreview01" || pf.got.Port != 8000 || !pf.got.Private {
		t.Fatalf("exit %d %q, request %+v", code, errs, pf.got)
	}
	if !strings.Contains(out, "8000-dev-devpreview01.") {
		t.Fatalf("output %q", out)
	}
}
