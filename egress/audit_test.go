package egress

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/api"
)

func TestAuditLogPersists(t *testing.T) {
	dir := t.TempDir()
	nop := func(string, ...any) {}
	l := openAuditLog(dir, "sb", 3, nop)
	for i := 0; i < 5; i++ {
		l.add(api.EgressEvent{Host: fmt.Sprintf("h%d", i)})
	}
	if got := l.tail(0); len(got) != 3 || got[0].Host != "h2" || got[2].Host != "h4" {
		t.Fatalf("ring: %+v", got)
	}
	if got := l.tail(1); len(got) != 1 || got[0].Host != "h4" {
		t.Fatalf("limit: %+v", got)
	}
	l.close()
	// A new daemon reads it back.
	again := openAuditLog(dir, "sb", 3, nop)
	if got := again.tail(0); len(got) != 3 || got[2].Host != "h4" {
		t.Fatalf("reloaded: %+v", got)
	}
	// Rotation keeps one old file.
	big := api.EgressEvent{Reason: string(make([]byte, 1<<20))}
	for i := 0; i < 5; i++ {
		again.add(big)
	}
	if _, err := os.Stat(filepath.Join(dir, "sb.jsonl.1")); err != nil {
		t.Fatalf("no rotation: %v", err)
	}
	again.remove()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left after remove: %v", ents)
	}
	// Memory only without a dir.
	mem := openAuditLog("", "sb", 2, nop)
	mem.add(api.EgressEvent{Host: "x"})
	if got := mem.tail(0); len(got) != 1 {
		t.Fatalf("memory log: %+v", got)
	}
}
