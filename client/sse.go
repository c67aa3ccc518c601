package client

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

// maxEventLine bounds one line of an event stream. The server splits output
// into events of at most 32 KiB (about 44 KiB as base64 JSON), so 1 MiB is
// ample; anything longer is a broken or hostile server.
const maxEventLine = 1 << 20

// errStreamEnded is returned by readEvents when the stream ends without
// the handler having accepted a terminal event.
var errStreamEnded = errors.New("event stream ended without a terminal event")

// readEvents parses server-sent events from r and calls fn with each event's
// name and data until fn reports done or fails. Comments (": ping") are
// keep-alives and are skipped.
func readEvents(r io.Reader, fn func(name string, data []byte) (done bool, err error)) error {
	return readEventsMax(r, maxEventLine, fn)
}

// readEventsMax is readEvents with lines of up to max bytes.
func readEventsMax(r io.Reader, max int, fn func(name string, data []byte) (done bool, err error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4<<10), max)
	var name string
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if name == "" && data.Len() == 0 {
				continue
			}
			if name == "" {
				name = "message" // the SSE default
			}
			done, err := fn(name, data.Bytes())
			if err != nil || done {
				return err
			}
			name = ""
			data.Reset()
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(string(line), ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return errdefs.Internal("server sent an event line longer than %d bytes", max)
		}
		return err
	}
	return errStreamEnded
}
