package forward

import (
	"net/http"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Object routes a call of durable object (class, id) to the member that
// holds its lease, so that one live instance serves it across the
// cluster; a free lease is taken here. A forwarded call is served here
// only while this member holds the lease, else refused "moved, retry". A
// holder that cannot be reached is 503: its lease ends within its TTL
// and the next call takes it.
func (f *Forwarder) Object(w http.ResponseWriter, r *http.Request, class, id string, rt Route) (Outcome, error) {
	if f.c.ObjectHolder == nil {
		return Local, nil
	}
	ctx := r.Context()
	holder, err := f.c.ObjectHolder(ctx, class, id)
	if err != nil {
		return Local, errdefs.Wrap(errdefs.ErrUnavailable, err, "find the member of object %s/%s: %v", class, id, err)
	}
	if holder == f.c.Self {
		return Local, nil
	}
	if from, ok := From(ctx); ok {
		return Local, errdefs.Unavailable("object %s/%s moved to member %q while the call from %q was in flight; retry", class, id, holder, from.Entry)
	}
	n, down := f.node(ctx, holder, false)
	if down != nil {
		return Local, errdefs.Wrap(errdefs.ErrUnavailable, down, "object %s/%s lives on member %q, which cannot be reached (%v); its lease ends soon, retry", class, id, holder, down)
	}
	out, err := f.proxy(w, r, class+"/"+id, n, rt, false, false, false)
	if err != nil {
		return out, errdefs.Wrap(errdefs.ErrUnavailable, err, "object %s/%s lives on member %q, which cannot be reached (%v); retry", class, id, holder, err)
	}
	return out, nil
}
