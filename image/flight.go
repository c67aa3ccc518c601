package image

import (
	"context"
	"sync"
	"time"
)

// flightTimeout bounds one shared fetch that nobody waits for any more.
const flightTimeout = 30 * time.Minute

// flights runs one fetch per key at a time: callers asking for a key
// whose fetch is under way wait for that one instead of downloading the
// same blobs again. The shared work runs under a context of its own, not
// any caller's, and goes on when the callers give up (a start's deadline,
// a client that disconnected): what it downloads and unpacks is what the
// retry of that start needs, and throwing it away would make a large
// image on a slow link impossible to start. flightTimeout bounds it.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done chan struct{}
	err  error
}

// do runs fn for key unless a run is in flight, and waits for the run or
// for ctx.
func (f *flights) do(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	f.mu.Lock()
	if f.m == nil {
		f.m = map[string]*flight{}
	}
	fl := f.m[key]
	if fl == nil {
		fl = &flight{done: make(chan struct{})}
		f.m[key] = fl
		go func() {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flightTimeout)
			fl.err = fn(fctx)
			cancel()
			f.mu.Lock()
			delete(f.m, key)
			f.mu.Unlock()
			close(fl.done)
		}()
	}
	f.mu.Unlock()
	select {
	case <-fl.done:
		return fl.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
