package controller_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/store/sqlite"
)

// TestObjectsAsTheNodeCallsThem: what node/local calls back into
// (Controllers) reaches the sandbox's object: a strict create, a wake that
// starts it again with its spec, a refresh, the journal under the
// sandbox's name, a destroy that drops the spec; a missing sandbox is not
// found and a second strict create already exists.
func TestObjectsAsTheNodeCallsThem(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fc := newFake()
	h := durable.NewHost(durable.Config{Store: st, Compute: fc, Logf: t.Logf})
	o, err := controller.Attach(h, controller.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Host() != h {
		t.Fatal("Host is not the host attached to")
	}
	if err := o.Wake(ctx, "box"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("wake of a missing sandbox: %v, want not found", err)
	}
	sb, err := o.Create(ctx, api.CreateSandboxRequest{Name: "box", SleepAfter: "1m"})
	if err != nil || sb.Name != "box" || !fc.running("box") {
		t.Fatalf("create: %+v %v (running %v)", sb, err, fc.running("box"))
	}
	if _, err := o.Create(ctx, api.CreateSandboxRequest{Name: "box"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second strict create: %v, want already exists", err)
	}
	if sp, ok := spec(t, h); !ok || sp.SleepAfter != time.Minute {
		t.Fatalf("spec after create: %+v %v", sp, ok)
	}
	if _, err := fc.Stop(ctx, "box", node.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := o.Wake(ctx, "box"); err != nil || !fc.running("box") {
		t.Fatalf("wake: %v (running %v)", err, fc.running("box"))
	}
	if err := o.Refresh(ctx, "box"); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if err := o.Journal(ctx, "box", "expose-port", "8080"); err != nil {
		t.Fatal(err)
	}
	j, err := st.Journal(ctx, "box")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range j {
		found = found || e.Op == "expose-port" && e.Detail == "8080"
	}
	if !found {
		t.Fatalf("journal %+v has no expose-port 8080", j)
	}
	if err := o.Destroy(ctx, "box"); err != nil || fc.boxes["box"] != nil {
		t.Fatalf("destroy: %v (box %+v)", err, fc.boxes["box"])
	}
	if _, ok := spec(t, h); ok {
		t.Fatal("the spec outlived the destroy")
	}
	if err := o.Destroy(ctx, "box"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("destroy of a destroyed sandbox: %v, want not found", err)
	}
}
