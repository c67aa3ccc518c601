package errdefs

import (
	"errors"
	"fmt"
	"time"
)

// Later is an error that says when the same request may succeed: berth's
// start queue is full (node/local's admission), say. Faces answer it with
// a Retry-After header; its kind is its cause's.
type Later struct {
	Err   error
	After time.Duration
}

func (l *Later) Error() string { return l.Err.Error() }
func (l *Later) Unwrap() error { return l.Err }

// TryLater is a resource-exhausted error that may be retried after d
// (rounded up to whole seconds, at least one).
func TryLater(d time.Duration, format string, args ...any) error {
	if d < time.Second {
		d = time.Second
	}
	d = (d + time.Second - 1).Truncate(time.Second)
	return &Later{Err: New(ErrResourceExhausted, "%s", fmt.Sprintf(format, args...)), After: d}
}

// RetryAfter is how long err says to wait before a retry, if it says.
func RetryAfter(err error) (time.Duration, bool) {
	var l *Later
	if errors.As(err, &l) {
		return l.After, true
	}
	return 0, false
}
