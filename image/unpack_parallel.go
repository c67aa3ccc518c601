package image

import (
	"archive/tar"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Creating a file is the expensive part of unpacking a layer of many small
// files (node_modules-like trees spend most of their time in the kernel's
// openat(O_CREAT)). So small regular files are written by a few workers
// while the tar stream is read on: the reader resolves each parent
// directory itself (confinement is decided there, never in a worker) and
// hands the worker an fd of that directory plus the file's bytes.
//
// Ordering stays that of the stream: every entry that is not a small
// regular file first waits for all workers (a barrier), and a small file
// whose own path or any ancestor has a write in flight waits too, so no
// entry can observe or undo a write that should have come before it.

// smallFileMax is the largest file handed to a worker; its bytes are held
// in memory until written (at most cap(jobs)+workers of them).
const smallFileMax = 256 << 10

type writeJob struct {
	pfd  int // parent dir, owned by the job
	name string
	base string
	hdr  *tar.Header
	data []byte
}

type writers struct {
	jobs     chan writeJob
	inflight sync.WaitGroup // submitted, not yet finished jobs
	workers  sync.WaitGroup

	mu      sync.Mutex
	err     error           // first failure; guarded by mu
	pending map[string]bool // paths with a job in flight; guarded by mu
}

func newWriters(n int) *writers {
	w := &writers{jobs: make(chan writeJob, 32), pending: map[string]bool{}}
	for i := 0; i < n; i++ {
		w.workers.Add(1)
		go w.work()
	}
	return w
}

func (w *writers) work() {
	defer w.workers.Done()
	for j := range w.jobs {
		err := writeSmall(j)
		w.mu.Lock()
		if err != nil && w.err == nil {
			w.err = fmt.Errorf("unpack %q: %w", j.name, err)
		}
		delete(w.pending, j.name)
		w.mu.Unlock()
		w.inflight.Done()
	}
}

func (w *writers) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// barrier waits for every submitted write and reports the first failure.
func (w *writers) barrier() error {
	w.inflight.Wait()
	return w.failure()
}

// busy reports whether name, one of its ancestors or one of its
// descendants has a write in flight.
func (w *writers) busy(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 {
		return false
	}
	for p := name; p != "." && p != "/"; p = path.Dir(p) {
		if w.pending[p] {
			return true
		}
	}
	prefix := name + "/"
	for p := range w.pending {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return false
}

func (w *writers) submit(j writeJob) {
	w.mu.Lock()
	w.pending[j.name] = true
	w.mu.Unlock()
	w.inflight.Add(1)
	w.jobs <- j
}

// close stops the workers after the writes in flight and reports the first
// failure. Unpack calls it on every return, so no worker outlives it.
func (w *writers) close() error {
	close(w.jobs)
	w.workers.Wait()
	return w.failure()
}

// slowWrites, set only by tests, delays every worker write so that an
// ordering bug becomes a certain failure instead of a rare one.
var slowWrites func()

func writeSmall(j writeJob) error {
	defer unix.Close(j.pfd)
	if slowWrites != nil {
		slowWrites()
	}
	if err := replaceAt(j.pfd, j.base); err != nil {
		return err
	}
	fd, err := unix.Openat(j.pfd, j.base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	for b := j.data; len(b) > 0; {
		n, err := unix.Write(fd, b)
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("write: %w", err)
		}
		b = b[n:]
	}
	if err := fdOwnerMode(fd, j.hdr); err != nil {
		unix.Close(fd)
		return err
	}
	unix.Close(fd)
	return setTimes(j.pfd, j.base, j.hdr)
}

// smallFile reads a small file's bytes from the stream and queues its
// write. The caller has checked the size limits.
func (u *unpacker) smallFile(name, dir, base string, hdr *tar.Header, r io.Reader) error {
	if u.w.busy(name) {
		if err := u.w.barrier(); err != nil {
			return err
		}
	}
	data := make([]byte, hdr.Size)
	if _, err := io.ReadFull(r, data); err != nil {
		return errdefs.InvalidArgument("truncated layer tar: %w", err)
	}
	pfd, err := u.parent(dir, true)
	if err != nil {
		return err
	}
	h := *hdr
	u.w.submit(writeJob{pfd: pfd, name: name, base: base, hdr: &h, data: data})
	return nil
}
