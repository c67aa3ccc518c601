package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agent/wire"
)

// Version is set at build time with -ldflags '-X main.Version=...'.
var Version = "dev"

// sudoSocket is the --sudo-socket flag.
var sudoSocket *string

// reservedThreads is how many idle OS threads the agent starts with.
const reservedThreads = 8

// reserveThreads has the Go runtime start n OS threads now and keep them
// idle for later. The agent shares the sandbox's pids limit, and a Go
// program dies when it cannot create a thread it needs: a thread bomb in
// the sandbox that holds every pid would take the agent with it the next
// time a blocking call needed a new thread. Idle threads are reused before
// new ones are made (the runtime never ends an idle thread), so the
// agent rides out such a bomb unless it needs more than n at once.
func reserveThreads(n int) {
	var locked, release sync.WaitGroup
	locked.Add(n)
	release.Add(1)
	var done sync.WaitGroup
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			// While locked, this goroutine holds its thread, so each of
			// the n needs a thread of its own.
			runtime.LockOSThread()
			locked.Done()
			release.Wait()
			runtime.UnlockOSThread() // back to the idle pool, not ended
		}()
	}
	locked.Wait()
	release.Done()
	done.Wait()
}

// termGrace is how long processes get to exit after SIGTERM before the
// agent SIGKILLs what is left and exits.
const termGrace = 5 * time.Second

func main() {
	// The same binary is `sudo` inside the sandbox (see agent/sudo.go).
	if filepath.Base(os.Args[0]) == "sudo" {
		os.Exit(agent.SudoMain(os.Args[1:], agent.SudoSocket))
	}
	socket := flag.String("socket", "/.berth/run/"+wire.SocketName, "unix socket to serve the agent API on")
	defaultUser := flag.String("default-user", "user", "user for execs and new files when a request names none (root if the sandbox has no such user)")
	defaultCwd := flag.String("default-cwd", "", "working directory for execs that name none (the image's WORKDIR; default the user's home)")
	version := flag.Bool("version", false, "print the version and exit")
	poolMember := flag.Bool("pool-member", false, "start as a warm-pool member: accept one POST /v1/identity from the host that binds the environment of later execs")
	// Negative-control flags, in a berthtest build only (testflags*.go).
	noFDCheck, noLogCap := testFlags()
	sudoSocket = flag.String("sudo-socket", agent.SudoSocket, "unix socket for sudo requests from inside the sandbox")
	flag.Parse()
	if *version {
		fmt.Printf("berth-agent %s (protocol %d)\n", Version, wire.ProtocolVersion)
		return
	}
	log.SetFlags(0)
	log.SetPrefix("berth-agent: ")
	if *noLogCap {
		agent.DisableLogLimits()
	} else {
		// stderr is the bundle's agent.log on the host: sandbox users can
		// make the agent log (sudo), so the file is capped.
		log.SetOutput(agent.NewCappedLog(os.Stderr, agent.LogMax))
	}
	if !*noFDCheck {
		// Fail closed: a descriptor the sandbox should not have means the
		// boundary is already breached; the sandbox does not start.
		if err := agent.CheckStartFDs(); err != nil {
			log.Printf("refusing to start: %v", err)
			os.Exit(1)
		}
		if err := agent.CloseOnExecInherited(); err != nil {
			log.Printf("cannot mark inherited descriptors close-on-exec: %v", err)
			os.Exit(1)
		}
	}
	reserveThreads(reservedThreads)
	os.Exit(run(*socket, *defaultUser, *defaultCwd, !*noFDCheck, *poolMember))
}

func run(socket, defaultUser, defaultCwd string, checkFDs, poolMember bool) int {
	pid1 := os.Getpid() == 1
	if !pid1 {
		// Run under another init (or in a test): become a subreaper so
		// orphans of our commands are still re-parented to us and reaped
		// here, and reap-all stays correct.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			log.Printf("cannot become a child subreaper: %v", err)
		}
	}
	// Register for SIGTERM before anything else: as PID 1 in a pid
	// namespace, a signal with no handler is simply ignored by the kernel.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defaultInheritedSignals()

	reaper := agent.NewReaper(true)
	reaper.CheckFDs = checkFDs
	srv, err := agent.NewServer(agent.Config{DefaultUser: defaultUser, DefaultCwd: defaultCwd, Version: Version, Reaper: reaper, AwaitIdentity: poolMember, SetProcessEnv: true})
	if err != nil {
		log.Print(err)
		return 1
	}
	ln, err := agent.Listen(socket)
	if err != nil {
		log.Print(err)
		return 1
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	sudoLn, err := agent.ListenSudo(*sudoSocket)
	if err != nil {
		log.Print(err)
		return 1
	}
	go func() { errc <- srv.ServeSudo(sudoLn) }()

	select {
	case err := <-errc:
		log.Printf("serve: %v", err)
		return 1
	case sig := <-sigs:
		log.Printf("%v: stopping", sig)
	}

	// Forward SIGTERM: to every exec's process group and, as PID 1, to
	// every process in the sandbox (kill(-1) from PID 1 of a pid namespace
	// reaches all of them but itself). Never kill(-1) when not PID 1: it
	// would reach every process we may signal outside the sandbox.
	srv.Signal(syscall.SIGTERM)
	if pid1 {
		syscall.Kill(-1, syscall.SIGTERM)
	}
	deadline := time.Now().Add(termGrace)
	for reaper.HasChildren() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if reaper.HasChildren() {
		srv.Signal(syscall.SIGKILL)
		if pid1 {
			syscall.Kill(-1, syscall.SIGKILL)
		}
	}
	// In-flight execs now end with their exit frames.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	reaper.Stop()
	return 0
}

// inheritable are the signals a process tree often starts with ignored
// (nohup ignores SIGHUP, shells without job control the stop signals,
// some supervisors SIGPIPE). An ignored disposition survives fork and
// exec, so without this every process in the sandbox would inherit it
// from whoever started berth: `kill -HUP` would not end a command, and
// `yes | head` would spin on EPIPE instead of dying.
var inheritable = []os.Signal{syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGUSR1, syscall.SIGUSR2}

// defaultInheritedSignals makes the processes the agent starts begin with
// the default action for inheritable signals, whatever the agent itself
// inherited: Go resets a signal it has a handler for to the default in
// every child, and keeps an ignored one ignored, so the agent takes a
// handler for each and drops what arrives (as PID 1 the kernel would not
// deliver them without one anyway).
func defaultInheritedSignals() {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, inheritable...)
	go func() {
		for range ch {
		}
	}()
}
