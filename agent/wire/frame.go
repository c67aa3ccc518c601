package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// FrameType says what a frame carries.
type FrameType byte

// Frame types. A stream carries any number of Stdout, Stderr and Heartbeat
// frames and ends with exactly one Exit (JSON api.ExitStatus) or Error (JSON
// api.Error) frame.
const (
	Stdout    FrameType = 1
	Stderr    FrameType = 2
	Exit      FrameType = 3
	Error     FrameType = 4
	Heartbeat FrameType = 5
)

func (t FrameType) String() string {
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
	// FrameHeaderLen is the size of a frame header.
	FrameHeaderLen = 5
	// MaxOutput is the largest stdout/stderr payload the agent sends.
	MaxOutput = 64 << 10
	// MaxRead is the largest frame a reader accepts. Anything bigger is a
	// protocol error: an honest agent never sends it, and a hostile one
	// must not make the host allocate without bound.
	MaxRead = 1 << 20
)

// ErrFrameTooLarge is returned by FrameReader.Next for a frame above its limit.
var ErrFrameTooLarge = errors.New("frame exceeds size limit")

// WriteFrame writes one frame. w is usually buffered; the caller flushes.
func WriteFrame(w io.Writer, t FrameType, payload []byte) error {
	var hdr [FrameHeaderLen]byte
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

// FrameReader reads frames from an untrusted stream.
type FrameReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewFrameReader returns a FrameReader that rejects frames larger than max bytes.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next frame. The payload is only valid until the next call.
// A stream that ends cleanly between frames returns io.EOF; one that ends
// inside a frame returns io.ErrUnexpectedEOF.
func (fr *FrameReader) Next() (FrameType, []byte, error) {
	var hdr [FrameHeaderLen]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if uint64(n) > uint64(fr.max) {
		return 0, nil, fmt.Errorf("%w: %s frame of %d bytes (limit %d)", ErrFrameTooLarge, FrameType(hdr[0]), n, fr.max)
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
	return FrameType(hdr[0]), p, nil
}
