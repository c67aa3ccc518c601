package snapshot

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// prefetcher asks the kernel to read a directory's files ahead of the
// walk, several at a time. A frozen copy of an upper is a new btrfs
// subvolume whose page cache starts cold: read one file after another,
// 200 MB in 10k files took 3.2 s here where eight readers at once took
// 0.76 s (and tar of the live, cached upper 0.2 s). The hints change
// nothing the capture writes: the walk still reads every byte itself, in
// its own order, and a hint that fails is dropped.
type prefetcher struct {
	work chan prefetchItem
	wg   sync.WaitGroup
	// queued bounds the hints in flight; past it new ones are dropped.
	queued atomic.Int64
}

type prefetchItem struct {
	b    *prefetchBatch
	name string
}

// prefetchBatch holds its own descriptor of one directory, closed once
// its last hint ran: the walk may close its descriptor first.
type prefetchBatch struct {
	fd   int
	left atomic.Int64
}

const (
	prefetchWorkers = 8
	prefetchQueue   = 4096
	// prefetchMaxFile: larger files are left to the kernel's own
	// sequential readahead as the walk reads them.
	prefetchMaxFile = 8 << 20
)

func newPrefetcher() *prefetcher {
	p := &prefetcher{work: make(chan prefetchItem, prefetchQueue)}
	for i := 0; i < prefetchWorkers; i++ {
		p.wg.Add(1)
		go p.run()
	}
	return p
}

func (p *prefetcher) run() {
	defer p.wg.Done()
	for it := range p.work {
		p.queued.Add(-1)
		p.hint(it.b.fd, it.name)
		if it.b.left.Add(-1) == 0 {
			unix.Close(it.b.fd)
		}
	}
}

func (p *prefetcher) hint(dirfd int, name string) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size == 0 || st.Size > prefetchMaxFile {
		return
	}
	_ = unix.Fadvise(fd, 0, st.Size, unix.FADV_WILLNEED)
}

// dir queues hints for names in the directory dirfd (which stays the
// caller's).
func (p *prefetcher) dir(dirfd int, names []string) {
	if p == nil || len(names) == 0 {
		return
	}
	n := min(len(names), prefetchQueue-int(p.queued.Load()))
	if n <= 0 {
		return
	}
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	b := &prefetchBatch{fd: fd}
	b.left.Store(int64(n))
	p.queued.Add(int64(n))
	for _, name := range names[:n] {
		p.work <- prefetchItem{b, name}
	}
}

// close stops the workers once the queued hints ran.
func (p *prefetcher) close() {
	if p == nil {
		return
	}
	close(p.work)
	p.wg.Wait()
}
