package main

import (
	"testing"
	"time"
)

func TestStartFlags(t *testing.T) {
	s, err := (&startFlags{start: "image", readyPort: 8080, readyTimeout: 5 * time.Second}).command()
	if err != nil || !s.Image || s.Ready.Port.Port != 8080 || s.Ready.Port.TimeoutMs != 5000 {
		t.Fatalf("%+v %v", s, err)
	}
	s, err = (&startFlags{start: "npm run dev", readyLog: "ready in"}).command()
	if err != nil || s.Image || s.Command != "npm run dev" || s.Ready.Log.Pattern != "ready in" {
		t.Fatalf("%+v %v", s, err)
	}
	if s, err := (&startFlags{}).command(); s != nil || err != nil {
		t.Fatalf("no flags: %+v %v", s, err)
	}
	for _, bad := range []startFlags{
		{readyPort: 80},
		{start: "x", readyPort: 80, readyLog: "y"},
		{start: "x", readyTimeout: time.Second},
	} {
		if _, err := bad.command(); err == nil {
			t.Fatalf("%+v: accepted", bad)
		}
	}
}
