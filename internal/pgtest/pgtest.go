package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDSN names the variable that points the tests at an existing server.
const EnvDSN = "BERTH_TEST_PG_DSN"

// EnvRequired, when set, turns every skip for want of a server into a
// failure: scripts/test.sh sets it for the root tier, so a machine without
// PostgreSQL cannot pass CI by skipping the store's tests.
const EnvRequired = "BERTH_TEST_PG_REQUIRED"

// skip skips t, or fails it when a server is required.
func skip(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(EnvRequired) != "" {
		t.Fatalf("$%s is set and: %s", EnvRequired, why)
	}
	t.Skip(why)
}

// Server is one PostgreSQL server the tests talk to: one this package
// started (it can be stopped and started again on the same port and data)
// or the external one named by $BERTH_TEST_PG_DSN.
type Server struct {
	// base is a DSN for the server's "postgres" database (or the
	// external DSN as given); DSN swaps the database name.
	base *url.URL

	// Set only for a server this package started.
	dir      string // temp dir: data/, sock/, log, pwfile
	bin      string // .../postgresql/NN/bin
	host     string // listen_addresses: one IPv4 address
	port     int
	uid, gid int
	cmd      *exec.Cmd
	exited   chan struct{}
	mu       sync.Mutex
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
	skip string
}

// Main runs the package's tests, then stops the shared server if one was
// started. Use it from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if shared.srv != nil && shared.srv.dir != "" {
		shared.srv.Stop()
		os.RemoveAll(shared.srv.dir)
	}
	return code
}

// Shared returns the package's server, starting it on first use (or the
// external one). It skips t when it can do neither.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() {
		if dsn := os.Getenv(EnvDSN); dsn != "" {
			u, err := url.Parse(dsn)
			if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
				shared.err = fmt.Errorf("$%s must be a postgres:// URL", EnvDSN)
				return
			}
			shared.srv = &Server{base: u}
			return
		}
		if why := cannotStart(); why != "" {
			shared.skip = why
			return
		}
		shared.srv, shared.err = start(Options{})
	})
	if shared.skip != "" {
		skip(t, shared.skip)
	}
	if shared.err != nil {
		t.Fatalf("PostgreSQL for the tests: %v", shared.err)
	}
	return shared.srv
}

// DB creates an empty database on the shared server, drops it when t
// ends, and returns its DSN.
func DB(t testing.TB) string {
	t.Helper()
	return Shared(t).NewDB(t)
}

// Start starts a server of t's own, stopped and removed when t ends. Tests
// that stop or restart the server use it; it needs root even when
// $BERTH_TEST_PG_DSN is set (that server is not the test's to stop).
func Start(t testing.TB) *Server {
	t.Helper()
	if why := cannotStart(); why != "" {
		skip(t, why)
	}
	s, err := start(Options{})
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		s.Stop()
		os.RemoveAll(s.dir)
	})
	return s
}

// cannotStart says why this process cannot start a server, or "".
func cannotStart() string {
	if os.Geteuid() != 0 {
		return "needs PostgreSQL: run as root (the test starts a throwaway server as user postgres) or set " + EnvDSN + "=postgres://user:pass@host:port/db (a user with CREATEDB)"
	}
	if _, err := binDir(); err != nil {
		return "needs PostgreSQL's server binaries (Debian: apt-get install postgresql, or scripts/deps.sh): " + err.Error()
	}
	if _, err := user.Lookup("postgres"); err != nil {
		return "needs the system user postgres (Debian's postgresql package creates it)"
	}
	return ""
}

// binDir finds the newest installed server under /usr/lib/postgresql.
func binDir() (string, error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(matches) == 0 {
		return "", errors.New("no /usr/lib/postgresql/*/bin/postgres")
	}
	version := func(p string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		return n
	}
	sort.Slice(matches, func(i, j int) bool { return version(matches[i]) > version(matches[j]) })
	return filepath.Dir(matches[0]), nil
}

// DSN returns the DSN of database db on the server.
func (s *Server) DSN(db string) string {
	u := *s.base
	u.Path = "/" + db
	return u.String()
}

// Host and Port are where the server listens (TCP).
func (s *Server) Host() string { return s.base.Hostname() }
func (s *Server) Port() int    { p, _ := strconv.Atoi(s.base.Port()); return p }

// NewDB creates an empty database, dropped when t ends, and returns its DSN.
func (s *Server) NewDB(t testing.TB) string {
	t.Helper()
	name := "berth_test_" + randHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.admin(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// FORCE: a test that failed may have left connections open.
		if err := s.admin(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	return s.DSN(name)
}

// admin runs one statement on the server's maintenance connection (the
// DSN's own database for an external server, "postgres" for ours).
func (s *Server) admin(ctx context.Context, sql string) error {
	dsn := s.base.String()
	if s.dir != "" {
		dsn = s.DSN("postgres")
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, sql)
	return err
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// sweepStale removes data dirs of servers whose test binary was killed
// (Pdeathsig ended the server, nothing removed its dir): older than an
// hour, and no live postmaster behind them. Other tests' dirs are younger
// or have one.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "berth-pg-*"))
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || time.Since(fi.ModTime()) < time.Hour {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			if pid, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); pid > 0 && syscall.Kill(pid, 0) == nil {
				continue
			}
		}
		os.RemoveAll(d)
	}
}

// Options say where a server started by Launch listens and whom it lets
// in. The zero value is what Start gives: loopback only.
type Options struct {
	// Host is the one IPv4 address the server listens on (default
	// 127.0.0.1); the port is picked free on it. It must exist on this
	// machine (a bridge's address, say), since the port is probed there.
	Host string
	// Clients are the CIDRs (besides loopback) allowed to connect, with
	// the password as everywhere: a suite whose daemons run in network
	// namespaces lists their addresses here.
	Clients []string
}

// Launch starts a server of the caller's own as Start does, for code that
// has no testing.TB (a TestMain): the caller ends it with Close. It fails
// when this process cannot start one (not root, no PostgreSQL installed).
func Launch(o Options) (*Server, error) {
	if why := cannotStart(); why != "" {
		return nil, errors.New(why)
	}
	return start(o)
}

// Close stops a server from Launch and removes its data dir.
func (s *Server) Close() error {
	if !s.Local() {
		return nil
	}
	err := s.Stop()
	os.RemoveAll(s.dir)
	return err
}

// CreateDB creates the empty database name (letters, digits and _) and
// returns its DSN; the caller drops it, or it goes with the server.
func (s *Server) CreateDB(ctx context.Context, name string) (string, error) {
	for _, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return "", fmt.Errorf("database name %q: want lower-case letters, digits and _", name)
		}
	}
	if err := s.admin(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return s.DSN(name), nil
}

// start makes a data dir with initdb and runs the server on a free port.
func start(o Options) (*Server, error) {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if ip := net.ParseIP(o.Host); ip == nil || ip.To4() == nil {
		return nil, fmt.Errorf("pgtest: host %q is not an IPv4 address", o.Host)
	}
	var hba strings.Builder
	for _, c := range o.Clients {
		if _, _, err := net.ParseCIDR(c); err != nil {
			return nil, fmt.Errorf("pgtest: client range %q: %w", c, err)
		}
		fmt.Fprintf(&hba, "host all all %s scram-sha-256\n", c)
	}
	sweepStale()
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	pg, err := user.Lookup("postgres")
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	// Not t.TempDir: its parents are root's 0700 dirs, which the postgres
	// user cannot traverse.
	dir, err := os.MkdirTemp("", "berth-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, host: o.Host, uid: uid, gid: gid}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	password := randHex(16)
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "sock"), 0o700); err != nil {
		return nil, err
	}
	for _, p := range []string{dir, pwfile, filepath.Join(dir, "sock")} {
		if err := os.Chown(p, uid, gid); err != nil {
			return nil, err
		}
	}
	// Password authentication even on loopback: other users of this
	// machine must not reach the test's databases.
	initdb := exec.Command("runuser", "-u", "postgres", "--", filepath.Join(bin, "initdb"),
		"-D", filepath.Join(dir, "data"), "-U", "postgres", "--pwfile", pwfile,
		"--auth=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	os.Remove(pwfile)
	if hba.Len() > 0 {
		f, err := os.OpenFile(filepath.Join(dir, "data", "pg_hba.conf"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return nil, err
		}
		_, err = f.WriteString(hba.String())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("pgtest: pg_hba.conf: %w", err)
		}
	}
	s.base = &url.URL{Scheme: "postgres", User: url.UserPassword("postgres", password), Path: "/postgres"}
	for try := 0; ; try++ {
		s.port, err = freePort(o.Host)
		if err != nil {
			return nil, err
		}
		s.base.Host = net.JoinHostPort(o.Host, strconv.Itoa(s.port))
		if err = s.Start(); err == nil || try == 2 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs the server (again, after Stop) on its port and data dir and
// waits until it takes connections.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir == "" {
		return errors.New("the external server ($" + EnvDSN + ") is not the tests' to start")
	}
	if s.cmd != nil {
		return errors.New("already running")
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// The server is this process's child, run as postgres directly (no
	// pg_ctl daemonizing it), so the test knows its pid and waits for it,
	// and Pdeathsig ends it even when the test binary is killed.
	// Durability is off: the data dies with the test.
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", filepath.Join(s.dir, "data"),
		"-c", "listen_addresses="+s.host, "-p", strconv.Itoa(s.port),
		"-c", "unix_socket_directories="+filepath.Join(s.dir, "sock"),
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(s.uid), Gid: uint32(s.gid)},
		Pdeathsig:  syscall.SIGQUIT,
		Setpgid:    true,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		cancel()
		if err == nil {
			c.Close(context.Background())
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("postgres exited at start: %s", s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			return fmt.Errorf("postgres did not take connections within 60s (%v): %s", err, s.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down by pid, the fast way (SIGINT: open sessions
// are ended with "terminating connection due to administrator command"),
// and waits for it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *Server) stopLocked() error {
	if s.cmd == nil {
		return nil
	}
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
		return nil
	case <-time.After(30 * time.Second):
	}
	cmd.Process.Signal(syscall.SIGQUIT) // immediate shutdown
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
	}
	cmd.Process.Kill()
	<-exited
	return errors.New("postgres ignored SIGINT and SIGQUIT; killed")
}

// Restart stops the server and starts it again, as `pg_ctl restart -m
// fast` does: every open connection is ended, the data stays.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start()
}

// Local reports whether this package started the server (so the test may
// stop it, and the machine's filesystem is the server's).
func (s *Server) Local() bool { return s.dir != "" }

// Chown gives path to the server's system user (a tablespace directory
// must be the server's).
func (s *Server) Chown(path string) error {
	if !s.Local() {
		return errors.New("the external server ($" + EnvDSN + ") runs as another machine's user")
	}
	return os.Chown(path, s.uid, s.gid)
}

// Pid is the postmaster's pid, 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
