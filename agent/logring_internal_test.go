package agent

import (
	"bytes"
	"testing"

	"github.com/berth-sh/berth/agent/wire"
)

func TestLogRingCapsEachStreamAndKeepsOrder(t *testing.T) {
	r := newLogRing(10)
	r.add(wire.Stdout, []byte("0123456789"))
	r.add(wire.Stderr, []byte("ab"))
	r.add(wire.Stdout, []byte("XYZ"))
	out, errb := r.contents()
	if string(out) != "3456789XYZ" || string(errb) != "ab" {
		t.Fatalf("contents %q %q", out, errb)
	}
	if r.streams[0].dropped != 3 || r.streams[0].bytes != 10 {
		t.Fatalf("accounting %+v", r.streams[0])
	}
	var order []string
	for _, c := range r.since(0) {
		order = append(order, c.t.String()+":"+string(c.p))
	}
	if got := bytes.Join(toBytes(order), []byte(",")); string(got) != "stdout:3456789,stderr:ab,stdout:XYZ" {
		t.Fatalf("order %s", got)
	}
	if got := r.since(2); len(got) != 1 || string(got[0].p) != "XYZ" {
		t.Fatalf("since(2) %+v", got)
	}
	// One chunk larger than the limit keeps its tail.
	r.add(wire.Stderr, bytes.Repeat([]byte("e"), 25))
	if _, errb := r.contents(); len(errb) != 10 || r.streams[1].dropped != 17 {
		t.Fatalf("big chunk: %d bytes, dropped %d", len(errb), r.streams[1].dropped)
	}
}

func toBytes(s []string) [][]byte {
	out := make([][]byte, len(s))
	for i, v := range s {
		out[i] = []byte(v)
	}
	return out
}
