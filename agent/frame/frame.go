package frame

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Type says what a frame carries.
type Type byte

// Frame types. A stream carries any number of Stdout, Stderr and Heartbeat
// frames and ends with exactly one Exit (JSON api.ExitStatus) or Error (JSON
// api.Error) frame.
const (
	Stdout    Type = 1
	Stderr    Type = 2
	Exit      Type = 3
	Error     Type = 4
	Heartbeat Type = 5
)

func (t Type) String() string {
	switch t {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	case Exit:
		return "exit"
	case Error:
		return "error"
	case Heartbeat:
		return "heartbeat"
	}
	return fmt.Sprintf("type %d", byte(t))
}

const (
	// HeaderLen is the size of a frame header.
	HeaderLen = 5
	// MaxOutput is the largest stdout/stderr payload the agent sends.
	MaxOutput = 64 << 10
	// MaxRead is the largest frame a reader accepts. Anything bigger is a
	// protocol error: an honest agent never sends it, and a hostile one
	// must not make the host allocate without bound.
	MaxRead = 1 << 20
)

// ErrTooLarge is returned by Reader.Next for a frame above the reader's limit.
var ErrTooLarge = errors.New("frame exceeds size limit")

// Write writes one frame. w is usually buffered; the caller flushes.
func Write(w io.Writer, t Type, payload []byte) error {
	var hdr [HeaderLen]byte
	hdr[0] = byte(t)
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	if len(payload) == 0 {
		return nil
	}
	_, err := w.Write(payload)
	return err
}

// Reader reads frames from an untrusted stream.
type Reader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewReader returns a Reader that rejects frames larger than max bytes.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next frame. The payload is only valid until the next call.
// A stream that ends cleanly between frames returns io.EOF; one that ends
// inside a frame returns io.ErrUnexpectedEOF.
func (fr *Reader) Next() (Type, []byte, error) {
	var hdr [HeaderLen]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if uint64(n) > uint64(fr.max) {
		return 0, nil, fmt.Errorf("%w: %s frame of %d bytes (limit %d)", ErrTooLarge, Type(hdr[0]), n, fr.max)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	p := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return Type(hdr[0]), p, nil
}
