package server

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Defaults for ConnLimits.
const (
	DefaultMaxConns      = 16384
	DefaultMaxConnsPerIP = 1024
	DefaultFDReserve     = 1024
)

// ConnLimits bound the connections LimitListener lets through.
type ConnLimits struct {
	// MaxConns caps open connections in total (default 16384).
	MaxConns int
	// MaxConnsPerIP caps open connections from one client address
	// (default 1024).
	MaxConnsPerIP int
	// FDReserve is how many file descriptors below RLIMIT_NOFILE stay for
	// the daemon's own work (sandbox mounts, runtime pipes, the store): a
	// connection that would eat into them is refused (default 1024, or a
	// quarter of the limit if that is less).
	FDReserve int
	// Off switches the limits off (weaken.HTTPGuard, for the adversarial
	// suite's negative control).
	Off bool
	// Logf reports refusals, at most once a second; nil: none.
	Logf func(format string, args ...any)
}

// LimitListener returns ln with the connection caps of l. A connection over
// a cap is answered with a short HTTP 503 (or 429 for the per-address cap)
// and closed at once, so that neither a flood of connections nor a flood
// from one address can take every fd of the daemon and starve its other
// clients and its own work.
func LimitListener(ln net.Listener, l ConnLimits) net.Listener {
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.MaxConnsPerIP <= 0 {
		l.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	lim := fdLimit()
	if l.FDReserve <= 0 {
		l.FDReserve = DefaultFDReserve
		if lim > 0 && l.FDReserve > lim/4 {
			l.FDReserve = lim / 4 // a host with a small limit still serves
		}
	}
	return &limitListener{Listener: ln, l: l, perIP: map[string]int{}, fdLimit: lim}
}

type limitListener struct {
	net.Listener
	l       ConnLimits
	fdLimit int

	mu         sync.Mutex
	total      int
	perIP      map[string]int
	fdChecked  time.Time
	fdTotal    int // conns open when the fds were last counted
	fdOpen     int
	lastLogged time.Time
	refused    int
}

// fdLimit is the soft RLIMIT_NOFILE (Go raises it to the hard limit at
// start), or 0 if unknown.
func fdLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}

// openFDs counts this process's open file descriptors.
func openFDs() (int, error) {
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(4096)
		n += len(names)
		if err != nil || len(names) == 0 {
			break
		}
	}
	return n - 1, nil // the directory itself
}

func (ln *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil || ln.l.Off {
			return c, err
		}
		ip := remoteHost(c.RemoteAddr().String())
		status, why := ln.admit(ip)
		if status == 0 {
			return &limitConn{Conn: c, ln: ln, ip: ip}, nil
		}
		refuse(c, status, why)
	}
}

// admit counts a new connection from ip in, or returns the status and
// reason to refuse it with.
func (ln *limitListener) admit(ip string) (int, string) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	var status int
	var why string
	switch {
	case ln.total >= ln.l.MaxConns:
		status, why = 503, fmt.Sprintf("the server has %d connections open, its limit", ln.total)
	case ln.perIP[ip] >= ln.l.MaxConnsPerIP:
		status, why = 429, fmt.Sprintf("%d connections are open from %s, the limit per client address", ln.perIP[ip], ip)
	case ln.fdsLow():
		status, why = 503, "the server is low on file descriptors"
	}
	if status != 0 {
		ln.refused++
		if ln.l.Logf != nil && time.Since(ln.lastLogged) > time.Second {
			ln.l.Logf("refusing connections: %s (%d refused since the last report)", why, ln.refused)
			ln.lastLogged, ln.refused = time.Now(), 0
		}
		return status, why
	}
	ln.total++
	ln.perIP[ip]++
	return 0, ""
}

// fdsLow reports whether accepting would leave fewer than FDReserve fds.
// The fds are counted again after 100 ms or 64 more connections, so a burst
// of accepts costs no more than a few directory reads. ln.mu is held.
func (ln *limitListener) fdsLow() bool {
	if ln.fdLimit == 0 {
		return false
	}
	if time.Since(ln.fdChecked) > 100*time.Millisecond || ln.total > ln.fdTotal+64 || ln.total < ln.fdTotal-64 {
		if n, err := openFDs(); err == nil {
			ln.fdOpen, ln.fdTotal, ln.fdChecked = n, ln.total, time.Now()
		}
	}
	est := ln.fdOpen + (ln.total - ln.fdTotal)
	return est+ln.l.FDReserve >= ln.fdLimit
}

func (ln *limitListener) release(ip string) {
	ln.mu.Lock()
	ln.total--
	if ln.perIP[ip]--; ln.perIP[ip] <= 0 {
		delete(ln.perIP, ip)
	}
	ln.mu.Unlock()
}

// refuse answers a refused connection in HTTP/1 (what every client of this
// listener speaks first, bar h2c prior knowledge) and closes it.
func refuse(c net.Conn, status int, why string) {
	body := fmt.Sprintf(`{"code":"resource_exhausted","message":"connection refused: %s; retry later"}`+"\n", why)
	text := "Service Unavailable"
	if status == 429 {
		text = "Too Many Requests"
	}
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s", status, text, len(body), body)
	_ = c.Close()
}

type limitConn struct {
	net.Conn
	ln   *limitListener
	ip   string
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.ln.release(c.ip) })
	return err
}
