package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxErrorBody bounds how much of an error response is read: a misbehaving
// or hostile server must not make the client allocate without limit.
const maxErrorBody = 64 << 10

// Client talks to one berth server. It is safe for concurrent use.
type Client struct {
	base string // scheme://host[:port], no trailing slash
	auth string // "Bearer <key>", built once
	hc   *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient replaces the client's own HTTP client (for custom TLS or
// tests). Its transport should keep connections alive.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client for the server at baseURL ("http://127.0.0.1:7070")
// that authenticates with apiKey.
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		base: strings.TrimRight(baseURL, "/"),
		auth: "Bearer " + apiKey,
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: newTransport()}
	}
	if c.hc.CheckRedirect == nil {
		// A copy, so that a caller's client is not changed.
		hc := *c.hc
		hc.CheckRedirect = noRedirects
		c.hc = &hc
	}
	return c
}

// noRedirects keeps the client from following any redirect. The berth API
// never redirects; a 3xx comes from something in between, and following
// one can turn a request into another: net/http re-sends a DELETE to the
// Location of a 307, so a DELETE of …/processes/.. redirected to the
// cleaned path once deleted the whole sandbox.
func noRedirects(req *http.Request, via []*http.Request) error { return http.ErrUseLastResponse }

// checkPath refuses a request path with an empty, "." or ".." segment:
// such an id is never valid, and the path would name another resource
// once anything between here and the handler cleans it.
func checkPath(p string) error {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for _, s := range segs {
		switch s {
		case "", ".", "..":
			return errdefs.InvalidArgument("invalid request path %s: a name or id is empty, \".\" or \"..\"", p)
		}
	}
	return nil
}

// newTransport is tuned for many short requests to one server: a large
// idle pool (benchmarks and agents run execs concurrently), no response
// compression (exec output is streamed, and gzip would buffer it), and no
// response-header timeout, because a streamed exec may legitimately send
// its first byte only when the command first prints.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableCompression:  true,
	}
}

// BaseURL is the server the client talks to.
func (c *Client) BaseURL() string { return c.base }

// request describes one API call.
type request struct {
	method, path string
	query        url.Values
	body         io.Reader
	contentType  string
	accept       string
}

// do sends req and returns the response if its status is 2xx; otherwise it
// consumes the body and returns the server's error as an errdefs kind.
func (c *Client) do(ctx context.Context, r request) (*http.Response, error) {
	if err := checkPath(r.path); err != nil {
		return nil, err
	}
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, r.body)
	if err != nil {
		return nil, errdefs.InvalidArgument("building request %s %s: %w", r.method, r.path, err)
	}
	req.Header.Set("Authorization", c.auth)
	if k, ok := ctx.Value(idemKey{}).(string); ok && k != "" && r.method != http.MethodGet {
		req.Header.Set(api.IdempotencyKeyHeader, k)
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	} else {
		req.Header.Set("Accept", "application/json")
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return res, nil
	}
	defer res.Body.Close()
	if res.StatusCode >= 300 && res.StatusCode < 400 {
		return nil, errdefs.Internal("%s %s was answered %d with a redirect to %q, which the client does not follow: the berth API never redirects, so %s is not a berth server or something in between rewrote the request",
			r.method, r.path, res.StatusCode, res.Header.Get("Location"), c.base)
	}
	return nil, decodeError(res)
}

func (c *Client) transportError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("berth request to %s: %w", c.base, ctxErr)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	return errdefs.Unavailable("cannot reach the berth server at %s: %w (is `berth serve` running?)", c.base, unwrapURLError(err))
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// decodeError turns an error response into an errdefs error, reading at
// most maxErrorBody bytes.
func decodeError(res *http.Response) error {
	err := decodeErrorBody(res)
	// A refusal that says when to come back (a full start queue: 429
	// with Retry-After) keeps it: errdefs.RetryAfter reads it.
	if ra := res.Header.Get("Retry-After"); ra != "" {
		if s, perr := strconv.Atoi(strings.TrimSpace(ra)); perr == nil && s >= 0 {
			return &errdefs.Later{Err: err, After: time.Duration(s) * time.Second}
		}
	}
	return err
}

func decodeErrorBody(res *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	var e api.Error
	if json.Unmarshal(b, &e) == nil && e.Code != "" {
		return e.Err()
	}
	msg := strings.TrimSpace(string(b))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(res.StatusCode)
	}
	return errdefs.FromCode(statusCode(res.StatusCode), fmt.Sprintf("server answered %d: %s", res.StatusCode, msg))
}

// statusCode guesses an error kind from a status when the body carries none
// (a proxy in between, or a server that crashed mid-response).
func statusCode(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusMethodNotAllowed:
		return "invalid_argument"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "permission_denied"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "failed_precondition"
	case http.StatusGone:
		return "expired"
	case http.StatusTooManyRequests:
		return "resource_exhausted"
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusGatewayTimeout:
		return "deadline_exceeded"
	}
	return "internal"
}

// doJSON sends in (if not nil) as JSON and decodes a JSON answer into out
// (if not nil). It returns the response status.
func (c *Client) doJSON(ctx context.Context, method, path string, query url.Values, in, out any) (int, error) {
	r := request{method: method, path: path, query: query}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, errdefs.InvalidArgument("encoding request: %w", err)
		}
		// A bytes.Reader lets net/http set Content-Length, so small
		// requests go out in one write without chunked framing.
		r.body = bytes.NewReader(b)
		r.contentType = "application/json"
	}
	res, err := c.do(ctx, r)
	if err != nil {
		return 0, err
	}
	defer closeBody(res.Body)
	if out != nil && res.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			return res.StatusCode, c.readError(ctx, "decoding response of "+method+" "+path, err)
		}
	}
	return res.StatusCode, nil
}

func (c *Client) readError(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", what, ctxErr)
	}
	return errdefs.Unavailable("%s: %w", what, err)
}

// closeBody drains a little of what is left so the connection can be reused
// (a JSON decoder leaves the trailing newline unread), then closes.
func closeBody(rc io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(rc, 4<<10))
	_ = rc.Close()
}

func sandboxPath(name string, rest ...string) string {
	p := "/v1/sandboxes/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Health reports the server's status and version. It needs no valid key.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/health", nil, nil, &h)
	return h, err
}
