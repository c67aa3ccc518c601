package watch_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
)

// The watch of an API write shows what a program's write shows: create for
// a new path, modify for an existing one, never a temp name or a move.
func TestWriteWatchEventsLookLikeAWrite(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	dir := filepath.Join(a.Dir, "w")
	os.Mkdir(dir, 0o755)
	col := &collector{w: watchT(t, c, dir, agentclient.WatchOptions{Recursive: true})}
	f := filepath.Join(dir, "new.txt")
	if err := c.WriteFile(ctx, f, strings.NewReader("one"), 0); err != nil {
		t.Fatal(err)
	}
	col.want(t, api.FileCreate, f, false)
	mark1 := filepath.Join(dir, "mark1")
	os.Mkdir(mark1, 0o755)
	col.want(t, api.FileCreate, mark1, true)
	if err := c.WriteFile(ctx, f, strings.NewReader("two, longer"), 0); err != nil {
		t.Fatal(err)
	}
	col.want(t, api.FileModify, f, false)
	mark2 := filepath.Join(dir, "mark2")
	os.Mkdir(mark2, 0o755)
	col.want(t, api.FileCreate, mark2, true)
	creates := 0
	for _, e := range col.seen {
		if e.Type != api.WatchEventType {
			continue
		}
		if e.Path != f && e.Path != mark1 && e.Path != mark2 {
			t.Errorf("event on a name nobody wrote: %s", evString(e))
		}
		if e.EventType == api.FileMoveTo || e.EventType == api.FileMoveFrom {
			t.Errorf("a write showed as a move: %s", evString(e))
		}
		if e.Path == f && e.EventType == api.FileCreate {
			creates++
		}
	}
	if creates != 1 {
		t.Errorf("%d creates of %s, want 1 (the overwrite is no create): %v", creates, f, col.strings())
	}
}

// The agent's own staging names never show in a watch, whoever makes them.
func TestWatchHidesStagingNames(t *testing.T) {
	a, c := newClient(t)
	dir := filepath.Join(a.Dir, "w")
	os.Mkdir(dir, 0o755)
	col := &collector{w: watchT(t, c, dir, agentclient.WatchOptions{Recursive: true})}
	os.WriteFile(filepath.Join(dir, ".berth-upload-0123456789abcdef"), []byte("x"), 0o600)
	os.Mkdir(filepath.Join(dir, fspath.StagingPrefix+"x"), 0o755)
	os.WriteFile(filepath.Join(dir, fspath.StagingPrefix+"x", "inner"), []byte("x"), 0o600)
	mark := filepath.Join(dir, "mark")
	os.Mkdir(mark, 0o755)
	col.want(t, api.FileCreate, mark, true)
	for _, e := range col.seen {
		if e.Type == api.WatchEventType && e.Path != mark {
			t.Errorf("staging name reported: %s", evString(e))
		}
	}
}
