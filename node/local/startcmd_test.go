package local

import (
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func TestStartProcessRequestFromImage(t *testing.T) {
	img := Image{Digest: "sha256:0123456789abcdef0123", Entrypoint: []string{"python3", "-m"}, Cmd: []string{"http.server", "it's"}, User: "web:web", WorkingDir: "/srv"}
	req, err := startProcessRequest(api.StartCommand{Image: true}, img)
	if err != nil {
		t.Fatal(err)
	}
	if req.ID != api.StartProcessID || req.Command != `exec 'python3' '-m' 'http.server' 'it'\''s'` || req.User != "web" || req.Cwd != "/srv" {
		t.Fatalf("%+v", req)
	}
	// No USER, no WORKDIR: root in /, as docker runs it; the caller's
	// own user and cwd win.
	req, _ = startProcessRequest(api.StartCommand{Image: true}, Image{Cmd: []string{"/bin/bash"}})
	if req.User != "root" || req.Cwd != "/" {
		t.Fatalf("defaults: %+v", req)
	}
	req, _ = startProcessRequest(api.StartCommand{Image: true, User: "user", Cwd: "/tmp"}, img)
	if req.User != "user" || req.Cwd != "/tmp" {
		t.Fatalf("overrides: %+v", req)
	}
	// A command runs as given, with the exec defaults.
	req, _ = startProcessRequest(api.StartCommand{Command: "npm run dev"}, img)
	if req.Command != "npm run dev" || req.User != "" || req.Cwd != "" {
		t.Fatalf("command: %+v", req)
	}
	if _, err := startProcessRequest(api.StartCommand{Image: true}, Image{Digest: img.Digest}); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("image without a command: %v", err)
	}
}
