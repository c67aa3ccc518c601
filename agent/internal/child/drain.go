package child

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// ReadPipe reads f in chunks and hands each (a fresh slice) to deliver until
// EOF, an error, or deliver returning false.
//
// Once the command has exited, its caller sets a read deadline on f
// (DrainDelay): a descendant that keeps the write end open (`server &`)
// must not hold the command open. That deadline only bounds the wait for
// more output; it never drops output already written. Go fails a read
// whose deadline has passed without looking at the pipe, so a reader that
// had not been scheduled yet (a loaded machine, a throttled cgroup) or was
// still handing the previous chunk to a slow consumer when the deadline
// passed used to lose the rest of the command's output: `echo TOKEN`
// answered with empty stdout and exit 0. When the deadline ends the loop,
// what the pipe holds at that moment is read and delivered before
// ReadPipe returns. Everything the command wrote before it exited is in
// the pipe by then, so none of it is lost.
func ReadPipe(f *os.File, deliver func([]byte) bool) {
	buf := make([]byte, ReadChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 && !deliver(append([]byte(nil), buf[:n]...)) {
			return
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				for _, p := range DrainAvailable(f, buf) {
					if !deliver(p) {
						return
					}
				}
			}
			return
		}
	}
}

// DrainAvailable reads, without blocking and without regard to f's
// deadline, the bytes f's pipe (or pty) holds now, in chunks of at most
// len(buf). It reads no more than was queued when it started, so a
// descendant that keeps writing cannot keep it going; the total is bounded
// by the pipe's capacity.
func DrainAvailable(f *os.File, buf []byte) [][]byte {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var out [][]byte
	rc.Control(func(fd uintptr) {
		// TIOCINQ is FIONREAD: bytes queued in a pipe or a pty master.
		left, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ)
		if err != nil {
			return
		}
		for left > 0 {
			n, err := unix.Read(int(fd), buf[:min(left, len(buf))])
			if n <= 0 || err != nil {
				return
			}
			out = append(out, append([]byte(nil), buf[:n]...))
			left -= n
		}
	})
	return out
}
