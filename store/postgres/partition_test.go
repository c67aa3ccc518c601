package postgres

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/pgtest"
	"github.com/berth-sh/berth/store"
)

// TestPartition drops every packet to and from the server's port (an
// nftables table of the test's own, on loopback): a connection the pool
// already holds and a new one both fail as unavailable in seconds rather
// than hanging, and once the packets flow again the same Store works. The
// timeouts are shortened for the test; the product's are 20 s.
func TestPartition(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for nftables")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft (nftables)")
	}
	srv := pgtest.Shared(t)
	if !srv.Local() {
		t.Skip("needs a server on this machine (it drops loopback packets)")
	}
	oldIdle, oldUser := keepAliveIdle, tcpUserTimeout
	keepAliveIdle, tcpUserTimeout = time.Second, 2*time.Second
	t.Cleanup(func() { keepAliveIdle, tcpUserTimeout = oldIdle, oldUser })

	ctx := context.Background()
	s := openDSN(t, srv.NewDB(t)+"?connect_timeout=2")
	if _, err := s.Put(ctx, store.Sandbox{Name: "a", State: api.StateRunning}); err != nil {
		t.Fatal(err)
	}
	table := fmt.Sprintf("berthpgpart%d", os.Getpid())
	nft := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("nft", args...).CombinedOutput(); err != nil {
			t.Fatalf("nft %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	port := fmt.Sprint(srv.Port())
	nft("add", "table", "inet", table)
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", table).Run() })
	nft("add", "chain", "inet", table, "out", "{ type filter hook output priority 0 ; }")
	nft("add", "rule", "inet", table, "out", "tcp", "dport", port, "drop")
	nft("add", "rule", "inet", table, "out", "tcp", "sport", port, "drop")

	for i := 0; i < 2; i++ { // the pooled connection, then a new one
		t0 := time.Now()
		_, err := s.Put(ctx, store.Sandbox{Name: "a", State: api.StateSleeping, Version: 1})
		d := time.Since(t0)
		if !errdefs.IsKind(err, errdefs.ErrUnavailable) {
			t.Fatalf("write %d across the partition: want unavailable, got %v (after %s)", i, err, d)
		}
		if d > 15*time.Second {
			t.Fatalf("write %d across the partition took %s to fail", i, d)
		}
		t.Logf("write %d across the partition failed after %s: %v", i, d.Round(time.Millisecond), err)
	}
	nft("delete", "table", "inet", table)
	var got store.Sandbox
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got, err = s.Get(ctx, "a"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("after the partition healed: %v", err)
	}
	if got.State != api.StateRunning || got.Version != 1 {
		t.Fatalf("a write refused during the partition was recorded: %+v", got)
	}
	if _, err := s.Put(ctx, got); err != nil {
		t.Fatalf("write after the partition healed: %v", err)
	}
}
