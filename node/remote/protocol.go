package remote

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
)

// The wire constants (see doc.go).
const (
	// Prefix is the path prefix of every route.
	Prefix = "/node/v1"
	// AgentProtocol is the Upgrade token of an agent tunnel.
	AgentProtocol = "berth-node-agent/1"
	// ExecContentType marks an exec answer: a stream of frames.
	ExecContentType = "application/vnd.berth.node-exec"

	maxBody     = 1 << 20  // control calls' request bodies
	maxExecBody = 80 << 20 // an exec request carries its stdin
	maxAnswer   = 16 << 20 // control calls' answers (a Status holds an api.Sandbox)
	maxErrBody  = 64 << 10 // an error envelope
	maxHead     = 16 << 10 // a tunnel's response head
	maxFrame    = 1 << 20  // one exec frame's payload

	// heartbeatEvery is how often an idle exec stream carries a frame,
	// and stallAfter how long the client waits for one before it takes
	// the node for gone (a silent half-open TCP connection would
	// otherwise hang Wait forever).
	heartbeatEvery = 5 * time.Second
	stallAfter     = 4 * heartbeatEvery
	// headDelay is how long an exec's answer may wait for its first
	// frame before its head is sent alone (so Exec returns).
	headDelay = 20 * time.Millisecond
)

// Exec frame types.
const (
	frameStdout    byte = 1
	frameStderr    byte = 2
	frameExit      byte = 3
	frameHeartbeat byte = 4
)

// execRequest is the body of POST …/exec.
type execRequest struct {
	Argv    []string         `json:"argv"`
	Options node.ExecOptions `json:"options"`
}

// exitPayload is the last frame of an exec: its code, or the error Wait
// returned on the node.
type exitPayload struct {
	Code  int        `json:"code"`
	Error *api.Error `json:"error,omitempty"`
}

type stopAnswer struct {
	Stopped bool `json:"stopped"`
}

type destroyRequest struct {
	Reason string `json:"reason,omitempty"`
}

type signalRequest struct {
	Signal int `json:"signal"`
}

type timeoutRequest struct {
	Timeout time.Duration `json:"timeout"` // nanoseconds
}

// frameWriter writes frames from several goroutines, flushing each so the
// bytes leave as they are produced.
type frameWriter struct {
	mu    sync.Mutex
	w     io.Writer
	flush func() error
	err   error
}

func (f *frameWriter) write(t byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.put(t, p); err != nil {
		return err
	}
	f.err = f.flush()
	return f.err
}

// last writes the exit frame and closes f without flushing: the handler
// returns next, and net/http then writes the frame and the chunked body's
// terminator in one write. The client must see that terminator to put
// the connection back in its pool; sent on its own, after a flushed exit
// frame, it arrives after the client has read its answer and closed the
// body, and the connection is thrown away (a new TCP connection for every
// exec: most of what remote exec added on loopback).
func (f *frameWriter) last(t byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.put(t, p)
	if f.err == nil {
		f.err = errStreamClosed
	}
	return err
}

// put buffers one frame (split at maxFrame). f.mu is held.
func (f *frameWriter) put(t byte, p []byte) error {
	if f.err != nil {
		return f.err
	}
	for first := true; first || len(p) > 0; first = false {
		chunk := p[:min(len(p), maxFrame)]
		p = p[len(chunk):]
		var head [5]byte
		head[0] = t
		binary.BigEndian.PutUint32(head[1:], uint32(len(chunk)))
		if _, f.err = f.w.Write(head[:]); f.err != nil {
			return f.err
		}
		if _, f.err = f.w.Write(chunk); f.err != nil {
			return f.err
		}
	}
	return nil
}

var errStreamClosed = errors.New("exec stream closed")

func (f *frameWriter) close() {
	f.mu.Lock()
	f.err = errStreamClosed
	f.mu.Unlock()
}

// readFrame reads one frame into buf (grown as needed) and returns its type
// and payload.
func readFrame(r io.Reader, buf []byte) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n > maxFrame {
		return 0, nil, errdefs.Unavailable("node protocol error: exec frame of %d bytes (limit %d)", n, maxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return head[0], buf, nil
}

// decodeError turns an error envelope back into its errdefs kind; a body
// that is not one becomes unavailable, naming the status.
func decodeError(status int, body io.Reader) error {
	data, err := io.ReadAll(io.LimitReader(body, maxErrBody+1))
	if err != nil || len(data) > maxErrBody {
		return errdefs.Unavailable("node answered HTTP %d and its error body could not be read", status)
	}
	var e api.Error
	if json.Unmarshal(data, &e) != nil || e.Code == "" {
		return errdefs.Unavailable("node answered HTTP %d without an error envelope: %s", status, trim(data))
	}
	return e.Err()
}

func trim(b []byte) string {
	if len(b) > 200 {
		return fmt.Sprintf("%q…", b[:200])
	}
	return fmt.Sprintf("%q", b)
}
