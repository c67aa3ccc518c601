package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// runObjects checks durable-object storage, alarms and the op journal.
func runObjects(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	t.Run("ObjectStorage", func(t *testing.T) {
		s := open(t)
		if _, ok, err := s.ObjectGet(ctx, "c/1", "k"); err != nil || ok {
			t.Fatalf("get missing: ok=%v err=%v", ok, err)
		}
		var w []store.ObjectWrite
		for i := 0; i < 5; i++ {
			w = append(w, store.ObjectWrite{Key: fmt.Sprintf("user:%d", i), Value: []byte(fmt.Sprint(i))})
		}
		w = append(w, store.ObjectWrite{Key: "zeta", Value: []byte(`"z"`)})
		if err := s.ObjectCommit(ctx, "c/1", w); err != nil {
			t.Fatal(err)
		}
		// Another object's keys are invisible.
		if err := s.ObjectCommit(ctx, "c/2", []store.ObjectWrite{{Key: "user:9", Value: []byte("9")}}); err != nil {
			t.Fatal(err)
		}
		v, ok, err := s.ObjectGet(ctx, "c/1", "user:3")
		if err != nil || !ok || string(v) != "3" {
			t.Fatalf("get: %q %v %v", v, ok, err)
		}
		all, err := s.ObjectList(ctx, "c/1", "user:", "", 0)
		if err != nil || len(all) != 5 || all[0].Key != "user:0" || all[4].Key != "user:4" {
			t.Fatalf("list prefix: %v %+v", err, all)
		}
		page, err := s.ObjectList(ctx, "c/1", "user:", "user:2", 2)
		if err != nil || len(page) != 2 || page[0].Key != "user:2" || page[1].Key != "user:3" {
			t.Fatalf("list page: %v %+v", err, page)
		}
		if err := s.ObjectCommit(ctx, "c/1", []store.ObjectWrite{{Key: "user:0", Delete: true}, {Key: "user:1", Value: []byte("11")}}); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.ObjectGet(ctx, "c/1", "user:0"); ok {
			t.Fatal("deleted key still there")
		}
		if v, _, _ := s.ObjectGet(ctx, "c/1", "user:1"); string(v) != "11" {
			t.Fatalf("overwrite: %q", v)
		}
		if err := s.ObjectDeleteAll(ctx, "c/1"); err != nil {
			t.Fatal(err)
		}
		if l, _ := s.ObjectList(ctx, "c/1", "", "", 0); len(l) != 0 {
			t.Fatalf("after delete all: %+v", l)
		}
		if l, _ := s.ObjectList(ctx, "c/2", "", "", 0); len(l) != 1 {
			t.Fatalf("other object touched: %+v", l)
		}
	})
	t.Run("ObjectAlarms", func(t *testing.T) {
		s := open(t)
		now := time.Now()
		a1, err := s.SetObjectAlarm(ctx, "c/1", now.Add(-time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetObjectAlarm(ctx, "c/2", now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		due, err := s.DueObjectAlarms(ctx, now, 0)
		if err != nil || len(due) != 1 || due[0].Object != "c/1" || due[0].Seq != a1.Seq || !due[0].Scheduled.Equal(a1.Scheduled) {
			t.Fatalf("due: %v %+v", err, due)
		}
		n, ok, err := s.AttemptObjectAlarm(ctx, "c/1", a1.Seq, now.Add(time.Minute))
		if err != nil || !ok || n != 1 {
			t.Fatalf("attempt: %d %v %v", n, ok, err)
		}
		if due, _ := s.DueObjectAlarms(ctx, now, 0); len(due) != 0 {
			t.Fatalf("attempted alarm moved to its retry time, still due: %+v", due)
		}
		if got, _, _ := s.GetObjectAlarm(ctx, "c/1"); !got.Scheduled.Equal(a1.Scheduled) || got.Attempts != 1 {
			t.Fatalf("attempt changed the scheduled time or lost the count: %+v", got)
		}
		// Re-arming replaces the alarm: the old delivery cannot clear it.
		a2, _ := s.SetObjectAlarm(ctx, "c/1", now.Add(-time.Second))
		if a2.Seq == a1.Seq {
			t.Fatal("seq did not change")
		}
		if _, ok, _ := s.AttemptObjectAlarm(ctx, "c/1", a1.Seq, now); ok {
			t.Fatal("attempt on a replaced alarm succeeded")
		}
		if err := s.ClearObjectAlarm(ctx, "c/1", a1.Seq); err != nil {
			t.Fatal(err)
		}
		got, ok, err := s.GetObjectAlarm(ctx, "c/1")
		if err != nil || !ok || got.Seq != a2.Seq || got.Attempts != 0 {
			t.Fatalf("stale clear removed the new alarm: %+v %v %v", got, ok, err)
		}
		if err := s.DeferObjectAlarm(ctx, "c/1", a2.Seq, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := s.GetObjectAlarm(ctx, "c/1"); got.Attempts != 0 || !got.At.After(now) || !got.Scheduled.Equal(a2.Scheduled) {
			t.Fatalf("defer: %+v", got)
		}
		if err := s.ClearObjectAlarm(ctx, "c/1", a2.Seq); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.GetObjectAlarm(ctx, "c/1"); ok {
			t.Fatal("cleared alarm still armed")
		}
		if err := s.DeleteObjectAlarm(ctx, "c/2"); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.GetObjectAlarm(ctx, "c/2"); ok {
			t.Fatal("deleted alarm still armed")
		}
	})
	t.Run("OpJournal", func(t *testing.T) {
		s := open(t)
		e, err := s.Begin(ctx, store.JournalEntry{Sandbox: "a", Op: "create", Key: "idem-1", Args: `{"x":1}`})
		if err != nil || e.Seq == 0 || e.Status != store.OpPending {
			t.Fatalf("begin: %+v %v", e, err)
		}
		if err := s.Finish(ctx, e.Seq, store.OpDone, `{"ok":true}`, "", time.Now()); err != nil {
			t.Fatal(err)
		}
		prev, err := s.Begin(ctx, store.JournalEntry{Sandbox: "a", Op: "create", Key: "idem-1"})
		if !errors.Is(err, errdefs.ErrAlreadyExists) || prev.Seq != e.Seq || prev.Result != `{"ok":true}` || prev.Status != store.OpDone || prev.Args != `{"x":1}` || prev.Finished.IsZero() {
			t.Fatalf("retry: %+v %v", prev, err)
		}
		fin, err := s.Begin(ctx, store.JournalEntry{Sandbox: "b", Op: "exec", Status: store.OpDone, Result: `{"x":1}`, Finished: time.Now()})
		if err != nil || fin.Status != store.OpDone {
			t.Fatalf("finished entry: %+v %v", fin, err)
		}
		if jb, _ := s.Journal(ctx, "b"); len(jb) != 1 || jb[0].Status != store.OpDone || jb[0].Result != `{"x":1}` || jb[0].Finished.IsZero() {
			t.Fatalf("finished entry read back: %+v", jb)
		}
		if _, err := s.JournalByKey(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("missing key: %v", err)
		}
		j, err := s.Journal(ctx, "a")
		if err != nil || len(j) != 1 || j[0].Result != `{"ok":true}` {
			t.Fatalf("journal: %+v %v", j, err)
		}
		old := time.Now().Add(-48 * time.Hour)
		if _, err := s.Begin(ctx, store.JournalEntry{Sandbox: "a", Op: "old", Key: "idem-old", At: old}); err != nil {
			t.Fatal(err)
		}
		if n, err := s.PruneJournal(ctx, time.Now().Add(-24*time.Hour)); err != nil || n != 1 {
			t.Fatalf("prune: %d %v", n, err)
		}
		if _, err := s.JournalByKey(ctx, "idem-old"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("pruned entry still there: %v", err)
		}
		if _, err := s.JournalByKey(ctx, "idem-1"); err != nil {
			t.Fatalf("recent entry pruned: %v", err)
		}
	})
}
