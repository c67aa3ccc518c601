package local

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// The node's Agent hands out a running sandbox's agent and never wakes
// one; the control plane's exec does (through the sandbox's object).
func TestNodeAgentDoesNotWake(t *testing.T) {
	r := newRig(t)
	nd := r.m.Compute(nil)
	if _, _, err := nd.Agent(ctx, "nobody"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("agent of a missing sandbox: %v", err)
	}
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "a"}, false); err != nil {
		t.Fatal(err)
	}
	ag, release, err := nd.Agent(ctx, "a")
	if err != nil || ag == nil {
		t.Fatalf("agent of a running sandbox: %v", err)
	}
	if st, _ := nd.Status(ctx, "a"); !st.Busy {
		t.Fatalf("a held agent does not mark the sandbox busy: %+v", st)
	}
	release()
	release() // idempotent
	if st, _ := nd.Status(ctx, "a"); st.Busy {
		t.Fatalf("busy after release: %+v", st)
	}
	if err := plane(r.m).Sleep(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	creates := r.rt.creates
	if _, _, err := nd.Agent(ctx, "a"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("agent of a sleeping sandbox: %v, want failed precondition", err)
	}
	if st, _ := nd.Status(ctx, "a"); st.Running || r.rt.creates != creates {
		t.Fatalf("the node's Agent woke the sandbox: %+v, %d creates", st, r.rt.creates-creates)
	}
	var out bytes.Buffer
	if st, err := plane(r.m).Exec(ctx, "a", api.ExecRequest{Command: "echo hi"}, &out, &out); err != nil || st.ExitCode != 0 || out.String() != "hi\n" {
		t.Fatalf("exec through the plane: %+v %q %v", st, out.String(), err)
	}
	if st, _ := nd.Status(ctx, "a"); !st.Running || r.rt.creates != creates+1 {
		t.Fatalf("the plane's exec did not wake the sandbox once: %+v, %d creates", st, r.rt.creates-creates)
	}
}

func TestNodeInfo(t *testing.T) {
	r := newRig(t)
	nd := r.m.Compute(nil)
	in, err := nd.Info(ctx)
	if err != nil || in.ID != LocalNodeID || in.Capacity.VCPU <= 0 || in.Capacity.MemoryMiB <= 0 || in.Capacity.Sandboxes != 0 || len(in.Images) != 0 {
		t.Fatalf("empty node: %+v %v", in, err)
	}
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "a"}, false); err != nil {
		t.Fatal(err)
	}
	want := instanceTypes[DefaultInstance]
	in, err = nd.Info(ctx)
	if err != nil || in.Capacity.Sandboxes != 1 || in.Capacity.UsedVCPU != want.VCPU || in.Capacity.UsedMemoryMiB != want.MemoryMiB {
		t.Fatalf("one running sandbox: %+v %v", in, err)
	}
	if len(in.Images) != 1 || in.Images[0] != "sha256:debian-trixie" {
		t.Fatalf("images held: %v", in.Images)
	}
	if in.Capacity.UsedDiskMB != want.DiskMB || in.Capacity.InFlight != 0 || len(in.Isolation) != 1 || in.Isolation[0] != api.IsolationRunc {
		t.Fatalf("disk, in flight, isolation: %+v %v", in.Capacity, in.Isolation)
	}
	if err := plane(r.m).Sleep(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if in, _ = nd.Info(ctx); in.Capacity.Sandboxes != 0 || in.Capacity.UsedVCPU != 0 || len(in.Images) != 1 {
		t.Fatalf("after sleep: %+v", in)
	}
	// A sleeping sandbox keeps its files, so its disk stays committed.
	if in.Capacity.UsedDiskMB != want.DiskMB {
		t.Fatalf("disk after sleep: %+v", in.Capacity)
	}
}

// TestHeldLayerSizes: a held layer's size is asked once and kept; one the
// store cannot tell is left out and asked again; a forgotten layer goes.
func TestHeldLayerSizes(t *testing.T) {
	var h holdings
	h.layer("snap_a", "aa", true)
	h.layer("snap_b", "sha256:bb", true)
	asked := map[string]int{}
	size := func(id string) (int64, bool) {
		asked[id]++
		return 100, id == "snap_a"
	}
	digests, sizes := h.layerSizes(size)
	if strings.Join(digests, ",") != "sha256:aa,sha256:bb" || len(sizes) != 1 || sizes["sha256:aa"] != 100 {
		t.Fatalf("first: %v %v", digests, sizes)
	}
	h.layerSizes(size)
	if asked["snap_a"] != 1 || asked["snap_b"] != 2 {
		t.Fatalf("asked %v: a known size is asked again, or an unknown one is not", asked)
	}
	h.layer("snap_a", "", false)
	if digests, sizes = h.layerSizes(size); len(digests) != 1 || len(sizes) != 0 {
		t.Fatalf("after forgetting a: %v %v", digests, sizes)
	}
}

// TestNodeInfoCountsStoredImages: an image in the host's store is held
// before any sandbox starts from it (a start needs no pull), and a
// failing list leaves the rest of the report.
func TestNodeInfoCountsStoredImages(t *testing.T) {
	r := newRig(t)
	nd := r.m.Compute(func(context.Context) ([]api.Image, error) {
		return []api.Image{{Name: "base", Digest: "sha256:stored"}, {Digest: "sha256:unnamed"}}, nil
	})
	in, err := nd.Info(ctx)
	if err != nil || strings.Join(in.Images, ",") != "sha256:stored,sha256:unnamed" {
		t.Fatalf("images %v %v", in.Images, err)
	}
	nd = r.m.Compute(func(context.Context) ([]api.Image, error) { return nil, errors.New("index unreadable") })
	if in, err := nd.Info(ctx); err != nil || in.Capacity.VCPU <= 0 {
		t.Fatalf("a failing list: %+v %v", in, err)
	}
}
