package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// State is one instance's view of the platform: the reference platform's
// ctx. It is handed to the constructor and stays valid for the instance's
// lifetime.
type State struct {
	Address   Address
	Storage   *Storage
	Container *Container
	h         *Host
}

func newState(h *Host, addr Address) *State {
	st := &State{Address: addr, h: h, Storage: &Storage{st: h.cfg.Store, object: addr.String()}}
	st.Container = &Container{compute: h.cfg.Compute, name: SandboxName(addr), addr: addr, journal: st}
	return st
}

// AlarmInfo is passed to an object's Alarm method.
type AlarmInfo struct {
	// ScheduledAt is the time the alarm was set for.
	ScheduledAt time.Time
	// RetryCount is 0 on the first delivery and counts earlier deliveries
	// that failed or were cut short by a crash.
	RetryCount int
	// ID is the same for every delivery of one SetAlarm: a good
	// idempotency key for the handler's effects.
	ID int64
}

// SetAlarm arms this object's one alarm at t, replacing any armed alarm.
// The alarm is persisted: if the daemon is down at t it fires after
// restart. Delivery is at least once.
func (s *State) SetAlarm(ctx context.Context, t time.Time) error {
	if t.IsZero() {
		return errdefs.InvalidArgument("alarm time is zero")
	}
	_, err := s.h.cfg.Store.SetObjectAlarm(ctx, s.Address.String(), t)
	return err
}

// GetAlarm returns the armed alarm's time, or false when none is armed.
func (s *State) GetAlarm(ctx context.Context) (time.Time, bool, error) {
	a, ok, err := s.h.cfg.Store.GetObjectAlarm(ctx, s.Address.String())
	if err != nil || !ok {
		return time.Time{}, false, err
	}
	return a.At, true, nil
}

// DeleteAlarm disarms the alarm.
func (s *State) DeleteAlarm(ctx context.Context) error {
	return s.h.cfg.Store.DeleteObjectAlarm(ctx, s.Address.String())
}

// JournalName is the journal stream of this object (as in
// GET /v1/sandboxes/{name}/journal, where objects appear as their
// container's sandbox name).
func (s *State) JournalName() string { return SandboxName(s.Address) }

// ErrInProgress is returned by Do when an operation with the same key is
// running right now.
var ErrInProgress = errdefs.FailedPrecondition("an operation with this idempotency key is in progress")

// Do runs an operation with an effect outside berth at most once per key:
// it records op, key and args (already redacted by the caller) in the
// journal, runs fn and records its result. A later Do with the same key,
// also after a restart, returns the recorded result (decoded into out)
// without running fn. If a daemon died while fn ran, the entry stays
// pending and the next Do runs fn again: effects must tolerate that one
// repeat, or check for it (at-least-once, the best a crash allows).
func (s *State) Do(ctx context.Context, op, key string, args any, out any, fn func(ctx context.Context) (any, error)) error {
	return s.h.do(ctx, s.JournalName(), "obj:"+s.Address.String()+":"+key, op, args, out, fn)
}

func (h *Host) do(ctx context.Context, stream, key, op string, args any, out any, fn func(ctx context.Context) (any, error)) error {
	ab, _ := json.Marshal(args)
	e, err := h.cfg.Store.Begin(ctx, store.JournalEntry{Sandbox: stream, Op: op, Key: key, Args: string(ab), At: h.cfg.Now()})
	switch {
	case err == nil:
	case errdefs.IsKind(err, errdefs.ErrAlreadyExists):
		switch e.Status {
		case store.OpDone:
			if out != nil && e.Result != "" {
				return json.Unmarshal([]byte(e.Result), out)
			}
			return nil
		case store.OpFailed:
			return fmt.Errorf("%s (recorded): %s", op, e.Error)
		}
		// Pending: a crashed earlier attempt (calls to one object are
		// serialized, so it cannot be running in this process). Run
		// again under the same entry.
	default:
		return err
	}
	res, ferr := fn(ctx)
	fctx := context.WithoutCancel(ctx)
	if ferr != nil {
		_ = h.cfg.Store.Finish(fctx, e.Seq, store.OpFailed, "", ferr.Error(), h.cfg.Now())
		return ferr
	}
	rb, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if err := h.cfg.Store.Finish(fctx, e.Seq, store.OpDone, string(rb), "", h.cfg.Now()); err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal(rb, out)
	}
	return nil
}

// record journals a container operation (no idempotency key: each call is
// its own effect) with its arguments and outcome.
func (s *State) record(ctx context.Context, op string, args any, fn func(ctx context.Context) error) error {
	ab, _ := json.Marshal(args)
	st := s.h.cfg.Store
	e, err := st.Begin(ctx, store.JournalEntry{Sandbox: s.JournalName(), Op: op, Args: string(ab), Detail: s.Address.String(), At: s.h.cfg.Now()})
	if err != nil {
		return err
	}
	ferr := fn(ctx)
	status, msg := store.OpDone, ""
	if ferr != nil {
		status, msg = store.OpFailed, ferr.Error()
	}
	_ = st.Finish(context.WithoutCancel(ctx), e.Seq, status, "", msg, s.h.cfg.Now())
	return ferr
}

// Record appends a finished operation to this object's journal: op, its
// arguments (redact secrets before passing them), its result or error,
// and timestamps. Use Do instead when a retry must not repeat the effect.
func (s *State) Record(ctx context.Context, op string, args, result any, opErr error) error {
	st := s.h.cfg.Store
	e := store.JournalEntry{Sandbox: s.JournalName(), Op: op, At: s.h.cfg.Now()}
	if args != nil {
		ab, _ := json.Marshal(args)
		e.Args = string(ab)
	}
	if d, ok := args.(string); ok {
		e.Args, e.Detail = "", d
	}
	e, err := st.Begin(ctx, e)
	if err != nil {
		return err
	}
	status, msg, res := store.OpDone, "", ""
	if opErr != nil {
		status, msg = store.OpFailed, opErr.Error()
	} else if result != nil {
		rb, _ := json.Marshal(result)
		res = string(rb)
	}
	return st.Finish(ctx, e.Seq, status, res, msg, s.h.cfg.Now())
}
