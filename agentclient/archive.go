package agentclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// ArchiveOptions selects what ReadArchive leaves out.
type ArchiveOptions struct {
	// Exclude holds gitignore-style patterns matched against paths
	// relative to the directory: "*.log" and "node_modules" match a base
	// name at any depth, "build/" only directories, "/out" or "a/b" are
	// anchored, "**" spans directories, "!" re-includes.
	Exclude []string
	// Gitignore honours the .gitignore files inside the tree.
	Gitignore bool
}

// ArchiveResult reports what WriteArchive restored.
type ArchiveResult = wire.ArchiveResult

// WriteArchiveOptions tunes WriteArchive.
type WriteArchiveOptions struct {
	// User owns every restored entry ("" is the sandbox's default user).
	User string
	// PreserveOwner keeps the uid and gid recorded in the archive instead.
	PreserveOwner bool
}

// endMarker is the tar end-of-archive marker: two zero blocks.
const endMarker = 1024

// ReadArchive streams dir's tree from the sandbox as an uncompressed PAX
// tar (names relative to dir, symlinks archived, never followed). The
// stream is not size-capped, but if the agent sends nothing for
// StallTimeout while the caller waits for bytes it is declared dead. A
// stream cut short, or one that ends without the tar end-of-archive
// marker, reads as an error that matches both errdefs.ErrUnavailable and
// io.ErrUnexpectedEOF, never as a clean end. The caller closes it.
func (c *Client) ReadArchive(ctx context.Context, dir string, opts ArchiveOptions) (io.ReadCloser, error) {
	if err := checkPath(dir); err != nil {
		return nil, err
	}
	q := pathQuery(dir)
	for _, p := range opts.Exclude {
		if !utf8.ValidString(p) {
			return nil, errdefs.InvalidArgument("exclude pattern %q is not valid UTF-8", p)
		}
		q.Add("exclude", p)
	}
	if opts.Gitignore {
		q.Set("gitignore", "1")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stall := c.stallTimeout()
	wd := time.AfterFunc(stall, func() { cancel(errStalled) })
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint("/v1/archive", q), nil)
	if err != nil {
		wd.Stop()
		cancel(nil)
		return nil, errdefs.InvalidArgument("build request: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		err = c.archiveError(ctx, stall, err)
		wd.Stop()
		cancel(nil)
		return nil, err
	}
	wd.Stop()
	if resp.StatusCode/100 != 2 {
		err := errorFromResponse(resp)
		resp.Body.Close()
		cancel(nil)
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); ct != wire.ArchiveContentType {
		resp.Body.Close()
		cancel(nil)
		return nil, errdefs.Unavailable("sandbox agent protocol error: archive answered with content type %q", ct)
	}
	return &archiveReader{c: c, ctx: ctx, cancel: cancel, body: resp.Body, wd: wd, stall: stall}, nil
}

// archiveReader runs the stall watchdog only while the caller waits for the
// agent: a slow consumer (compressing, uploading) is not a stalled agent.
type archiveReader struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelCauseFunc
	body   io.ReadCloser
	wd     *time.Timer
	stall  time.Duration
	tail   [endMarker]byte
	total  int64
	err    error
}

func (r *archiveReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	r.wd.Reset(r.stall)
	n, err := r.body.Read(p)
	r.wd.Stop()
	r.keepTail(p[:n])
	switch {
	case err == io.EOF:
		if r.total < endMarker || !bytes.Equal(r.tail[:], make([]byte, endMarker)) {
			r.err = truncated("the archive ends without its end-of-archive marker")
			return n, r.err
		}
	case err != nil:
		r.err = r.c.archiveError(r.ctx, r.stall, err)
		return n, r.err
	}
	return n, err
}

func (r *archiveReader) keepTail(p []byte) {
	r.total += int64(len(p))
	if len(p) >= endMarker {
		copy(r.tail[:], p[len(p)-endMarker:])
		return
	}
	copy(r.tail[:], r.tail[len(p):])
	copy(r.tail[endMarker-len(p):], p)
}

func (r *archiveReader) Close() error {
	r.wd.Stop()
	err := r.body.Close()
	r.cancel(nil)
	return err
}

// truncated is an Unavailable error that also matches io.ErrUnexpectedEOF,
// so a tar or compression reader above it reports a cut stream as one.
func truncated(why string) error {
	return fmt.Errorf("%w: %w", errdefs.Unavailable("sandbox agent archive stream cut: %s", why), io.ErrUnexpectedEOF)
}

// archiveError explains a failed archive transfer.
func (c *Client) archiveError(ctx context.Context, stall time.Duration, err error) error {
	if context.Cause(ctx) == errStalled {
		return truncated(fmt.Sprintf("nothing received for %s", stall))
	}
	if ctx.Err() != nil {
		return fmt.Errorf("archive: %w", ctx.Err())
	}
	var kind *errdefs.Error
	if errors.As(err, &kind) {
		return kind
	}
	return truncated(err.Error())
}

// WriteArchive restores an uncompressed tar from r into dir in the sandbox,
// all or nothing: the agent unpacks into a staging directory beside dir and
// swaps it into place only when the whole archive was valid; on error dir is
// untouched. Entries are owned by user ("" is the default user). Hostile
// entries (.., absolute names, links leading outside, device nodes) fail
// the restore. r is not closed.
func (c *Client) WriteArchive(ctx context.Context, dir string, r io.Reader, user string) (ArchiveResult, error) {
	return c.WriteArchiveWith(ctx, dir, r, WriteArchiveOptions{User: user})
}

// WriteArchiveWith is WriteArchive with options.
func (c *Client) WriteArchiveWith(ctx context.Context, dir string, r io.Reader, opts WriteArchiveOptions) (ArchiveResult, error) {
	if err := checkPath(dir); err != nil {
		return ArchiveResult{}, err
	}
	if !utf8.ValidString(opts.User) {
		return ArchiveResult{}, errdefs.InvalidArgument("user is not valid UTF-8")
	}
	q := pathQuery(dir)
	if opts.User != "" {
		q.Set("user", opts.User)
	}
	if opts.PreserveOwner {
		q.Set("preserveOwner", "1")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := c.stallTimeout()
	wd := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer wd.Stop()
	body := &uploadReader{r: r, wd: wd, stall: stall}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, endpoint("/v1/archive", q), body)
	if err != nil {
		return ArchiveResult{}, errdefs.InvalidArgument("build request: %w", err)
	}
	req.ContentLength = -1
	req.Header.Set("Content-Type", wire.ArchiveContentType)
	resp, err := c.hc.Do(req)
	if err != nil {
		if serr := body.sourceErr(); serr != nil {
			return ArchiveResult{}, fmt.Errorf("restore: reading the archive: %w", serr)
		}
		if context.Cause(ctx) == errStalled {
			return ArchiveResult{}, errdefs.Unavailable("sandbox agent stopped reading the archive: nothing accepted for %s", stall)
		}
		return ArchiveResult{}, c.transportError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return ArchiveResult{}, errorFromResponse(resp)
	}
	var res ArchiveResult
	if err := decodeBody(resp.Body, maxErrorBody, &res); err != nil {
		return ArchiveResult{}, err
	}
	return res, nil
}

// uploadReader arms the stall watchdog only while the transport is handing
// our bytes to the agent, not while we wait on the source (a slow blob
// download is not a stalled agent). Once the source is drained the
// watchdog is off: unpacking the last entry, syncing and swapping the tree
// into place are bounded by the transport's response-header timeout.
type uploadReader struct {
	r     io.Reader
	wd    *time.Timer
	stall time.Duration
	mu    sync.Mutex
	err   error
}

func (u *uploadReader) Read(p []byte) (int, error) {
	u.wd.Stop()
	n, err := u.r.Read(p)
	if err == nil {
		u.wd.Reset(u.stall)
	} else if err != io.EOF {
		u.mu.Lock()
		u.err = err
		u.mu.Unlock()
	}
	return n, err
}

func (u *uploadReader) sourceErr() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

// Close hides r's own Close: the transport closes request bodies, and r
// belongs to the caller.
func (u *uploadReader) Close() error { return nil }
