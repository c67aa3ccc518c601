package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestRoundTripAndLimits(t *testing.T) {
	var buf bytes.Buffer
	WriteFrame(&buf, Stdout, []byte("out"))
	WriteFrame(&buf, Heartbeat, nil)
	WriteFrame(&buf, Exit, []byte(`{"exitCode":0}`))
	r := NewFrameReader(&buf, 1024)
	for _, want := range []struct {
		t FrameType
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
	WriteFrame(&buf, Stdout, make([]byte, 2000))
	if _, _, err := NewFrameReader(&buf, 1024).Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized: %v", err)
	}

	buf.Reset()
	WriteFrame(&buf, Stdout, []byte("truncated payload"))
	cut := bytes.NewReader(buf.Bytes()[:10])
	if _, _, err := NewFrameReader(cut, 1024).Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut inside a frame: %v", err)
	}
	if _, _, err := NewFrameReader(bytes.NewReader([]byte{1, 0}), 1024).Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut inside a header: %v", err)
	}
}
