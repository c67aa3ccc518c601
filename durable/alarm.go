package durable

import (
	"context"
	"reflect"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/store"
)

// FailpointAlarmHandled is hit after an alarm handler returned and before
// the alarm is cleared: a crash there redelivers the alarm.
const FailpointAlarmHandled = "durable.alarm-handled"

// Run delivers due alarms until ctx ends. Call it once, after Register.
func (h *Host) Run(ctx context.Context) {
	t := time.NewTicker(h.cfg.AlarmTick)
	defer t.Stop()
	for {
		h.FireDue(ctx)
		h.evictIdle()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// FireDue delivers every alarm due now and waits for the deliveries.
// Deliveries to different objects run concurrently.
func (h *Host) FireDue(ctx context.Context) {
	due, err := h.cfg.Store.DueObjectAlarms(ctx, h.cfg.Now(), 256)
	if err != nil {
		h.cfg.Logf("durable: due alarms: %v", err)
		return
	}
	due = h.owned(ctx, due)
	done := make(chan struct{}, len(due))
	for _, a := range due {
		go func(a store.ObjectAlarm) {
			defer func() { done <- struct{}{} }()
			h.deliver(ctx, a)
		}(a)
	}
	for range due {
		<-done
	}
}

// owned keeps the alarms whose objects this host owns (Config.Owns).
func (h *Host) owned(ctx context.Context, due []store.ObjectAlarm) []store.ObjectAlarm {
	if h.cfg.Owns == nil {
		return due
	}
	out := due[:0:0]
	for _, a := range due {
		class, id, ok := strings.Cut(a.Object, "/")
		if !ok {
			continue
		}
		mine, err := h.cfg.Owns(ctx, Address{Class: class, ID: id})
		if err != nil {
			h.cfg.Logf("durable: alarm for %s: who owns it: %v", a.Object, err)
			continue
		}
		if mine {
			out = append(out, a)
		}
	}
	return out
}

func backoff(attempt int) time.Duration {
	d := time.Second << min(attempt, 10)
	return min(d, 5*time.Minute)
}

// deliver runs one alarm. Before the handler runs, the attempt is counted
// and the alarm moved to its retry time in the store, so a crash during the
// handler redelivers it (with a higher RetryCount) after restart.
func (h *Host) deliver(ctx context.Context, a store.ObjectAlarm) {
	class, id, ok := strings.Cut(a.Object, "/")
	if !ok {
		return
	}
	addr := Address{Class: class, ID: id}
	c, in, err := h.acquire(addr)
	if err != nil {
		// The class is not registered on this daemon (any more): keep the
		// alarm for a daemon that knows it, but stop polling it hot.
		h.cfg.Logf("durable: alarm for %s: %v", a.Object, err)
		_ = h.cfg.Store.DeferObjectAlarm(ctx, a.Object, a.Seq, h.cfg.Now().Add(time.Minute))
		return
	}
	defer h.release(in)
	attempts, ok, err := h.cfg.Store.AttemptObjectAlarm(ctx, a.Object, a.Seq, h.cfg.Now().Add(backoff(a.Attempts)))
	if err != nil || !ok {
		return // replaced or deleted meanwhile
	}
	if attempts > h.cfg.MaxAlarmRetries+1 {
		h.cfg.Logf("durable: alarm for %s dropped after %d attempts", a.Object, attempts-1)
		_ = h.cfg.Store.ClearObjectAlarm(ctx, a.Object, a.Seq)
		return
	}
	if !c.alarm {
		_ = h.cfg.Store.ClearObjectAlarm(ctx, a.Object, a.Seq)
		return
	}
	if err := h.ensure(c, in); err != nil {
		h.cfg.Logf("durable: alarm for %s: %v", a.Object, err)
		return
	}
	info := AlarmInfo{ScheduledAt: a.Scheduled, RetryCount: attempts - 1, ID: a.Seq}
	out := reflect.ValueOf(in.obj).MethodByName("Alarm").Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(info)})
	if e := out[0]; !e.IsNil() {
		h.cfg.Logf("durable: alarm for %s (retry %d): %v", a.Object, info.RetryCount, e.Interface())
		return // stays armed at its retry time
	}
	failpoint.Hit(FailpointAlarmHandled)
	// Clear only the alarm delivered: the handler may have armed a new one.
	if err := h.cfg.Store.ClearObjectAlarm(context.WithoutCancel(ctx), a.Object, a.Seq); err != nil {
		h.cfg.Logf("durable: clear alarm for %s: %v", a.Object, err)
	}
}
