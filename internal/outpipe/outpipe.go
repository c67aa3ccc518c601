package outpipe

import (
	"io"
	"sync"
)

// Pipe is an in-memory pipe whose writer never blocks. Beyond its limit
// output is dropped rather than held: a reader that does not keep up loses
// the excess, the producer is never stalled by it.
type Pipe struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	limit  int
	closed bool
}

// New returns an empty open pipe that holds at most limit unread bytes
// (limit <= 0: no limit).
func New(limit int) *Pipe {
	p := &Pipe{limit: limit}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// Write appends b (what fits under the limit) and always reports all of b
// written; after Close it fails with io.ErrClosedPipe.
func (p *Pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, io.ErrClosedPipe
	}
	keep := b
	if p.limit > 0 {
		keep = b[:min(max(p.limit-len(p.buf), 0), len(b))]
	}
	p.buf = append(p.buf, keep...)
	p.cond.Broadcast()
	return len(b), nil
}

// Read blocks until there is output or the pipe is closed; after Close it
// returns what is left, then io.EOF.
func (p *Pipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.buf) == 0 && !p.closed {
		p.cond.Wait()
	}
	if len(p.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	if len(p.buf) == 0 {
		p.buf = nil // let a large burst's array go
	}
	return n, nil
}

// Close ends the pipe: the reader gets what is left, then io.EOF.
func (p *Pipe) Close() error {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	return nil
}
