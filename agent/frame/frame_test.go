package frame

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestRoundTripAndLimits(t *testing.T) {
	var buf bytes.Buffer
	Write(&buf, Stdout, []byte("out"))
	Write(&buf, Heartbeat, nil)
	Write(&buf, Exit, []byte(`{"exitCode":0}`))
	r := NewReader(&buf, 1024)
	for _, want := range []struct {
		t Type
		p string
	}{{Stdout, "out"}, {Heartbeat, ""}, {Exit, `{"exitCode":0}`}} {
		typ, p, err := r.Next()
		if err != nil || typ != want.t || string(p) != want.p {
			t.Fatalf("got %v %q %v, want %v %q", typ, p, err, want.t, want.p)
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("clean end: %v", err)
	}

	buf.Reset()
	Write(&buf, Stdout, make([]byte, 2000))
	if _, _, err := NewReader(&buf, 1024).Next(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized: %v", err)
	}

	buf.Reset()
	Write(&buf, Stdout, []byte("truncated payload"))
	cut := bytes.NewReader(buf.Bytes()[:10])
	if _, _, err := NewReader(cut, 1024).Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut inside a frame: %v", err)
	}
	if _, _, err := NewReader(bytes.NewReader([]byte{1, 0}), 1024).Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut inside a header: %v", err)
	}
}
