package outpipe

import (
	"errors"
	"io"
	"testing"
)

func TestPipe(t *testing.T) {
	p := New(5)
	if n, err := p.Write([]byte("abc")); n != 3 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	// Past the limit: reported written, dropped.
	if n, err := p.Write([]byte("defg")); n != 4 || err != nil {
		t.Fatalf("Write past the limit = %d, %v", n, err)
	}
	p.Close()
	if _, err := p.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Write after Close = %v, want ErrClosedPipe", err)
	}
	got, err := io.ReadAll(p)
	if err != nil || string(got) != "abcde" {
		t.Fatalf("read %q, %v; want abcde", got, err)
	}
}

func TestReadWaitsForWrite(t *testing.T) {
	p := New(0)
	done := make(chan string)
	go func() { b, _ := io.ReadAll(p); done <- string(b) }()
	p.Write([]byte("late"))
	p.Close()
	if got := <-done; got != "late" {
		t.Fatalf("read %q, want late", got)
	}
}
