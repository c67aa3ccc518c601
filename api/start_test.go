package api

import (
	"encoding/json"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestStartCommandJSONForms(t *testing.T) {
	for in, want := range map[string]StartCommand{
		`"image"`:                      {Image: true},
		`"npm run dev"`:                {Command: "npm run dev"},
		`{"image":true}`:               {Image: true},
		`{"command":"x","user":"app"}`: {Command: "x", User: "app"},
	} {
		var got StartCommand
		if err := json.Unmarshal([]byte(in), &got); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got.Image != want.Image || got.Command != want.Command || got.User != want.User {
			t.Fatalf("%s: %+v, want %+v", in, got, want)
		}
	}
	var req CreateSandboxRequest
	if err := json.Unmarshal([]byte(`{"name":"a","start":{"image":true,"ready":{"port":{"port":8080}}}}`), &req); err != nil {
		t.Fatal(err)
	}
	if req.Start == nil || !req.Start.Image || req.Start.Ready.Port.Port != 8080 {
		t.Fatalf("nested: %+v", req.Start)
	}
	for _, bad := range []string{`7`, `["image"]`, `{"image":"yes"}`, `{"comand":"x"}`, `{"command":"x","ready":{"port":{"prot":1}}}`} {
		var s StartCommand
		if err := json.Unmarshal([]byte(bad), &s); err == nil {
			t.Fatalf("%s: decoded as %+v, want an error", bad, s)
		}
	}
}

func TestStartCommandShape(t *testing.T) {
	port := &WaitPortRequest{Port: 80}
	logw := &WaitLogRequest{Pattern: "up"}
	for _, bad := range []StartCommand{
		{},
		{Image: true, Command: "x"},
		{Image: true, Ready: &Readiness{}},
		{Command: "x", Ready: &Readiness{Port: port, Log: logw}},
	} {
		if err := bad.CheckShape(); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("%+v: %v, want invalid argument", bad, err)
		}
	}
	for _, ok := range []StartCommand{{Image: true}, {Command: "x", Ready: &Readiness{Log: logw}}, {Image: true, Ready: &Readiness{Port: port}}} {
		if err := ok.CheckShape(); err != nil {
			t.Fatalf("%+v: %v", ok, err)
		}
	}
	if got := (Readiness{Port: port}).ReadyTimeoutMs(); got != DefaultReadyTimeoutMs {
		t.Fatalf("default timeout %d", got)
	}
	if got := (Readiness{Log: &WaitLogRequest{Pattern: "x", TimeoutMs: 5}}).ReadyTimeoutMs(); got != 5 {
		t.Fatalf("given timeout %d", got)
	}
}
