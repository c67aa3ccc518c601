package agent

import "github.com/berth-sh/berth/agent/wire"

// logChunk is one read of a process's stdout or stderr. seq orders chunks
// across both streams, so a replay interleaves them as they were read.
type logChunk struct {
	seq uint64
	t   wire.FrameType
	p   []byte
}

// logStream is the retained tail of one output stream.
type logStream struct {
	chunks  []logChunk
	bytes   int64
	dropped int64
}

// logRing keeps the last limit bytes of each of a process's two output
// streams. Without a cap a process that floods its output (`yes`) would
// make the agent, PID 1 of the sandbox, allocate until the sandbox's memory
// limit OOM-kills it, and with it every process in the sandbox. The caller
// synchronizes access.
type logRing struct {
	limit   int64
	seq     uint64
	streams [2]logStream // stdout, stderr
}

func newLogRing(limit int64) *logRing { return &logRing{limit: limit} }

func (r *logRing) stream(t wire.FrameType) *logStream {
	if t == wire.Stderr {
		return &r.streams[1]
	}
	return &r.streams[0]
}

// add appends p (which the ring now owns) and drops the oldest bytes of
// that stream beyond the limit.
func (r *logRing) add(t wire.FrameType, p []byte) {
	if len(p) == 0 {
		return
	}
	s := r.stream(t)
	r.seq++
	s.chunks = append(s.chunks, logChunk{seq: r.seq, t: t, p: p})
	s.bytes += int64(len(p))
	for s.bytes > r.limit && len(s.chunks) > 0 {
		excess := s.bytes - r.limit
		first := &s.chunks[0]
		if int64(len(first.p)) <= excess {
			s.bytes -= int64(len(first.p))
			s.dropped += int64(len(first.p))
			first.p = nil
			s.chunks = s.chunks[1:]
			continue
		}
		// Keep the tail of the oldest chunk. Copy it so the dropped
		// head's memory is released.
		first.p = append([]byte(nil), first.p[excess:]...)
		s.bytes -= excess
		s.dropped += excess
	}
}

// since returns the retained chunks with seq > after, in order. The chunks'
// bytes are never modified, so the caller may use them without the lock.
func (r *logRing) since(after uint64) []logChunk {
	a, b := r.streams[0].chunks, r.streams[1].chunks
	var out []logChunk
	i, j := 0, 0
	for i < len(a) && a[i].seq <= after {
		i++
	}
	for j < len(b) && b[j].seq <= after {
		j++
	}
	for i < len(a) || j < len(b) {
		if j >= len(b) || (i < len(a) && a[i].seq < b[j].seq) {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return out
}

// contents returns copies of both retained streams.
func (r *logRing) contents() (stdout, stderr []byte) {
	cat := func(s *logStream) []byte {
		out := make([]byte, 0, s.bytes)
		for _, c := range s.chunks {
			out = append(out, c.p...)
		}
		return out
	}
	return cat(&r.streams[0]), cat(&r.streams[1])
}
