package metering

import "github.com/berth-sh/berth/api"

// ring is a fixed-size history of samples, oldest overwritten first.
type ring struct {
	buf  []api.UsageSample
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]api.UsageSample, n)} }

func (r *ring) add(s api.UsageSample) {
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// last is the newest sample; ok is false on an empty ring.
func (r *ring) last() (api.UsageSample, bool) {
	if !r.full && r.next == 0 {
		return api.UsageSample{}, false
	}
	return r.buf[(r.next-1+len(r.buf))%len(r.buf)], true
}

// all returns a copy of the samples, oldest first.
func (r *ring) all() []api.UsageSample {
	if !r.full {
		return append([]api.UsageSample(nil), r.buf[:r.next]...)
	}
	out := make([]api.UsageSample, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}
