package events

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Headers of a webhook delivery.
const (
	HeaderID        = "Berth-Event-Id"
	HeaderType      = "Berth-Event-Type"
	HeaderSignature = "Berth-Signature"
)

// DefaultTolerance is how old a signature Verify accepts by default.
const DefaultTolerance = 5 * time.Minute

func mac(secret []byte, t int64, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	fmt.Fprintf(h, "%d.", t)
	h.Write(body)
	return h.Sum(nil)
}

// Sign returns the Berth-Signature header value for body at time t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">".
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := t.Unix()
	return "t=" + strconv.FormatInt(ts, 10) + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

// Verify checks a Berth-Signature header against the raw request body: a
// v1 signature under secret, made no more than tolerance from now (0:
// DefaultTolerance), so a captured delivery cannot be replayed later.
// The comparison is constant-time. Several v1 values are allowed (a
// secret being rotated); one must match.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	var ts int64
	var sigs [][]byte
	haveT := false
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return errdefs.Unauthenticated("signature: bad timestamp %q", v)
			}
			ts, haveT = n, true
		case "v1":
			b, err := hex.DecodeString(v)
			if err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	if !haveT || len(sigs) == 0 {
		return errdefs.Unauthenticated("signature: want t=<unix>,v1=<hex>")
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return errdefs.Unauthenticated("signature: timestamp %d is %s from now, outside %s", ts, d.Round(time.Second), tolerance)
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return errdefs.Unauthenticated("signature: no v1 signature matches")
}

// ValidateURL checks an operator's webhook URL: absolute http or https
// with a host, no credentials in it (they would land in logs).
func ValidateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errdefs.InvalidArgument("webhook %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errdefs.InvalidArgument("webhook %q: want an http:// or https:// URL", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return errdefs.InvalidArgument("webhook %q: no host", raw)
	}
	if u.User != nil {
		return errdefs.InvalidArgument("webhook %q: credentials in the URL are refused (the secret signs deliveries)", u.Redacted())
	}
	if u.Fragment != "" {
		return errdefs.InvalidArgument("webhook %q: a fragment is not sent to the server", raw)
	}
	return nil
}

// Webhook delivers the feed's events to one URL, in order, at least once.
type Webhook struct {
	URL    string
	Secret []byte
	Feed   *Feed
	// CursorFile holds the id of the last delivered event; it is written
	// (atomically) after each delivery and read at Run. A missing file
	// starts at the journal's head: events from now on.
	CursorFile string
	// Client sends the POSTs; nil: a client with a 10 s timeout that
	// follows no redirect.
	Client *http.Client
	// Backoff is the first retry's delay, doubled per retry up to
	// MaxBackoff; Tries bounds the attempts per event, after which the
	// event is logged as dropped and delivery moves on. Zero values:
	// 1 s, 1 min, 10 tries.
	Backoff, MaxBackoff time.Duration
	Tries               int
	// Poll is how often the journal is read when idle (0: 250 ms).
	Poll time.Duration
	Logf func(format string, args ...any)
	// Now is the signing clock (tests); nil is time.Now.
	Now func() time.Time
}

// logURL is the URL as logs show it: without its query, which may hold a
// token.
func (w *Webhook) logURL() string {
	if i := strings.IndexByte(w.URL, '?'); i >= 0 {
		return w.URL[:i] + "?…"
	}
	return w.URL
}

func (w *Webhook) logf(format string, args ...any) {
	if w.Logf != nil {
		w.Logf(format, args...)
	}
}

func (w *Webhook) readCursor(ctx context.Context) (int64, error) {
	b, err := os.ReadFile(w.CursorFile)
	if os.IsNotExist(err) {
		head, err := w.Feed.Head(ctx)
		if err != nil {
			return 0, err
		}
		return head, w.writeCursor(head)
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("webhook cursor %s: %w", w.CursorFile, err)
	}
	return n, nil
}

func (w *Webhook) writeCursor(seq int64) error {
	if err := os.MkdirAll(filepath.Dir(w.CursorFile), 0o700); err != nil {
		return err
	}
	tmp := w.CursorFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(seq, 10)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, w.CursorFile)
}

// Run delivers until ctx ends.
func (w *Webhook) Run(ctx context.Context) error {
	if err := ValidateURL(w.URL); err != nil {
		return err
	}
	poll := w.Poll
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	var cur int64
	for {
		c, err := w.readCursor(ctx)
		if err == nil {
			cur = c
			break
		}
		w.logf("webhook %s: cursor: %v", w.logURL(), err)
		if !sleepCtx(ctx, poll*4) {
			return ctx.Err()
		}
	}
	for {
		evs, next, err := w.Feed.After(ctx, cur, 100)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			w.logf("webhook %s: read journal: %v", w.logURL(), err)
		}
		for _, ev := range evs {
			if err := w.deliverWithRetry(ctx, ev); err != nil {
				if ctx.Err() != nil {
					return ctx.Err() // the cursor stays before ev: redelivered after a restart
				}
				w.logf("webhook %s: event %s (%s %s) dropped: %v", w.logURL(), ev.ID, ev.Type, ev.Sandbox, err)
			}
			seq, _ := strconv.ParseInt(ev.ID, 10, 64)
			if err := w.writeCursor(seq); err != nil {
				w.logf("webhook %s: write cursor: %v", w.logURL(), err)
			}
		}
		if next != cur {
			cur = next
			if err := w.writeCursor(cur); err != nil {
				w.logf("webhook %s: write cursor: %v", w.logURL(), err)
			}
		}
		if len(evs) == 0 && !sleepCtx(ctx, poll) {
			return ctx.Err()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (w *Webhook) deliverWithRetry(ctx context.Context, ev api.Event) error {
	tries, delay, maxDelay := w.Tries, w.Backoff, w.MaxBackoff
	if tries <= 0 {
		tries = 10
	}
	if delay <= 0 {
		delay = time.Second
	}
	if maxDelay <= 0 {
		maxDelay = time.Minute
	}
	var err error
	for i := 0; i < tries; i++ {
		if i > 0 {
			if !sleepCtx(ctx, delay) {
				return ctx.Err()
			}
			delay = min(delay*2, maxDelay)
		}
		if err = w.deliver(ctx, ev); err == nil {
			return nil
		}
		w.logf("webhook %s: event %s, try %d of %d: %v", w.logURL(), ev.ID, i+1, tries, err)
	}
	return err
}

// defaultClient follows no redirect: a 3xx is an answer that is not 2xx,
// so the delivery is retried, never re-sent to where the redirect points.
var defaultClient = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// deliver makes one attempt; any 2xx answer is a delivery.
func (w *Webhook) deliver(ctx context.Context, ev api.Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	now := time.Now()
	if w.Now != nil {
		now = w.Now()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "berth-webhook")
	req.Header.Set(HeaderID, ev.ID)
	req.Header.Set(HeaderType, ev.Type)
	req.Header.Set(HeaderSignature, Sign(w.Secret, now, body))
	c := w.Client
	if c == nil {
		c = defaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = w.logURL() // its query may hold a token; errors are logged
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}
