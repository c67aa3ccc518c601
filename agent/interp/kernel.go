package interp

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// The kernels are small REPL drivers embedded in the agent and passed to the
// interpreter on its command line. A javascript context needs only node on
// PATH and a bash context bash (with base64); a python context runs an
// IPython kernel (python3 with ipykernel and jupyter_client, in the base
// image), which kernels/python_kernel.py starts and drives over the Jupyter
// protocol, with kernels/python_setup.py as the kernel's setup code.
var (
	//go:embed kernels/python_kernel.py
	pythonKernel string
	//go:embed kernels/python_setup.py
	pythonSetup string
	//go:embed kernels/node_kernel.js
	nodeKernel string
	//go:embed kernels/bash_kernel.sh
	bashKernel string
)

const (
	// kernelStartTimeout bounds an interpreter's start up to its ready event.
	kernelStartTimeout = 30 * time.Second
	// pythonStartTimeout is the bound for python: IPython's start is CPU
	// bound (about 2 s of one core), and a small instance has a fraction.
	pythonStartTimeout = 120 * time.Second
	// maxKernelEvent bounds one event line (a large PNG is the biggest).
	maxKernelEvent = 64 << 20
)

// kernelEvent is an event line from a kernel, or raw fd output.
type kernelEvent struct {
	api.CodeEvent
	Pid int `json:"pid,omitempty"` // ready
}

// kernel is one running interpreter process.
type kernel struct {
	pid    int
	bash   bool             // the bash kernel: its own request line, group interrupts
	toK    *os.File         // fd 3 of the kernel: requests
	events chan kernelEvent // control events and raw output
	exited chan struct{}    // closed once the process was reaped
	exit   child.Exit

	mu     sync.Mutex
	reaped bool
}

// kernelArgv returns the interpreter and arguments for language.
func kernelArgv(language string) []string {
	switch language {
	case api.LangPython:
		return []string{"python3", "-u", "-c", pythonKernel, pythonSetup}
	case api.LangBash:
		return []string{"bash", "--norc", "--noprofile", "-c", bashKernel, "berth-bash"}
	}
	return []string{"node", "-e", nodeKernel}
}

// startKernel starts an interpreter for c and waits for its ready event.
func (m *Contexts) startKernel(c *codeContext) (*kernel, error) {
	argv := kernelArgv(c.language)
	env := map[string]string{"PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
	if c.language != api.LangPython {
		// IPython picks matplotlib's inline backend itself (figures become
		// display data); elsewhere no display is available.
		env["MPLBACKEND"] = "Agg"
	}
	for k, v := range c.env {
		env[k] = v
	}
	plan, cred, err := m.cfg.Prepare(&api.ExecRequest{Argv: argv, Env: env, Cwd: c.cwd, User: c.user})
	if err != nil {
		if errdefs.IsKind(err, errdefs.ErrNotFound) {
			return nil, errdefs.FailedPrecondition("%s not found in the sandbox image: a %s code context needs %s on PATH", argv[0], c.language, argv[0])
		}
		return nil, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, errdefs.Internal("open %s: %w", os.DevNull, err)
	}
	defer devnull.Close()
	var p [8]*os.File // outR outW errR errW reqR reqW evR evW
	closeAll := func() {
		for _, f := range p {
			if f != nil {
				f.Close()
			}
		}
	}
	for i := 0; i < 8; i += 2 {
		if p[i], p[i+1], err = os.Pipe(); err != nil {
			closeAll()
			return nil, errdefs.ResourceExhausted("create pipe: %w", err)
		}
	}
	outR, outW, errR, errW, reqR, reqW, evR, evW := p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]
	attr := &syscall.ProcAttr{
		Dir:   plan.Dir,
		Env:   plan.Env,
		Files: []uintptr{devnull.Fd(), outW.Fd(), errW.Fd(), reqR.Fd(), evW.Fd()},
		// Own process group: delete kills whatever the code spawned too.
		Sys: &syscall.SysProcAttr{Setpgid: true, Credential: cred},
	}
	pid, exitCh, err := m.cfg.Start(plan, attr)
	outW.Close()
	errW.Close()
	reqR.Close()
	evW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		reqW.Close()
		evR.Close()
		return nil, err
	}
	k := &kernel{pid: pid, bash: c.language == api.LangBash, toK: reqW, events: make(chan kernelEvent, 1024), exited: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(3)
	go k.readControl(evR, &wg)
	go k.pumpRaw(outR, api.CodeEventStdout, &wg)
	go k.pumpRaw(errR, api.CodeEventStderr, &wg)
	go func() {
		e := <-exitCh
		k.mu.Lock()
		k.exit, k.reaped = e, true
		k.mu.Unlock()
		close(k.exited)
	}()
	go func() { wg.Wait(); close(k.events) }()

	startTimeout := kernelStartTimeout
	if c.language == api.LangPython {
		startTimeout = pythonStartTimeout
	}
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	var early strings.Builder
	for {
		select {
		case ev, ok := <-k.events:
			if !ok {
				<-k.exited
				msg := strings.TrimSpace(early.String())
				if len(msg) > 2000 {
					msg = msg[len(msg)-2000:]
				}
				return nil, errdefs.FailedPrecondition("%s exited while starting (%s): %s", argv[0], k.describeExit(), msg)
			}
			if ev.Type == "ready" {
				return k, nil
			}
			if ev.Type == api.CodeEventStderr || ev.Type == api.CodeEventStdout {
				early.WriteString(ev.Text)
			}
		case <-t.C:
			k.kill()
			return nil, errdefs.Unavailable("%s did not start within %s", argv[0], startTimeout)
		}
	}
}

// readControl forwards the kernel's event lines. The kernel runs sandbox
// code, so its lines are parsed defensively and unknown types dropped.
func (k *kernel) readControl(f *os.File, wg *sync.WaitGroup) {
	defer wg.Done()
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxKernelEvent)
	for sc.Scan() {
		var ev kernelEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Type {
		case "ready", api.CodeEventStdout, api.CodeEventStderr, api.CodeEventResult, api.CodeEventError, api.CodeEventComplete:
			k.events <- ev
		}
	}
}

// syncMark is what a kernel writes to fds 1 and 2 after a run, before its
// complete event: seeing it on both pipes means every byte a subprocess
// wrote during the run was forwarded, so output never trails complete.
const syncMark = "\x00\x01berth-sync\x01\x00"

// syncEvent is the pseudo event type pumpRaw sends for a syncMark.
const syncEvent = "sync"

// pumpRaw forwards output written straight to fd 1 or 2 (subprocesses,
// C extensions, node's process.stdout), cutting out sync marks.
func (k *kernel) pumpRaw(f *os.File, typ string, wg *sync.WaitGroup) {
	defer wg.Done()
	defer f.Close()
	buf := make([]byte, 32<<10)
	var pending []byte // output not forwarded yet
	emit := func(b []byte) {
		if len(b) > 0 {
			k.events <- kernelEvent{CodeEvent: api.CodeEvent{Type: typ, Text: strings.ToValidUTF8(string(b), "\uFFFD")}}
		}
	}
	for {
		n, err := f.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.Index(pending, []byte(syncMark))
			if i < 0 {
				break
			}
			emit(pending[:i])
			k.events <- kernelEvent{CodeEvent: api.CodeEvent{Type: syncEvent, Text: typ}}
			pending = pending[i+len(syncMark):]
		}
		// Hold back a tail that may be the start of a mark split
		// across reads.
		keep := 0
		for l := len(syncMark) - 1; l > 0; l-- {
			if len(pending) >= l && bytes.HasPrefix([]byte(syncMark), pending[len(pending)-l:]) {
				keep = l
				break
			}
		}
		if err != nil {
			keep = 0
		}
		emit(pending[:len(pending)-keep])
		pending = append(pending[:0], pending[len(pending)-keep:]...)
		if err != nil {
			return
		}
	}
}

// signal sends sig to the interpreter unless it was already reaped (its
// pid may then belong to someone else).
func (k *kernel) signal(sig syscall.Signal) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.reaped {
		syscall.Kill(k.pid, sig)
	}
}

// signalGroup sends sig to the interpreter's process group unless the
// interpreter was already reaped.
func (k *kernel) signalGroup(sig syscall.Signal) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.reaped {
		syscall.Kill(-k.pid, sig)
	}
}

// kill kills the interpreter's whole process group and closes its request
// pipe, then waits (bounded) until it was reaped.
func (k *kernel) kill() {
	k.mu.Lock()
	if !k.reaped {
		syscall.Kill(-k.pid, syscall.SIGKILL)
		syscall.Kill(k.pid, syscall.SIGKILL)
	}
	k.mu.Unlock()
	k.toK.Close()
	select {
	case <-k.exited:
	case <-time.After(5 * time.Second):
	}
	// Drain so the pumps are not left blocked on a full channel.
	go func() {
		for range k.events {
		}
	}()
}

func (k *kernel) alive() bool {
	select {
	case <-k.exited:
		return false
	default:
		return true
	}
}

func (k *kernel) describeExit() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.reaped {
		return "still running"
	}
	if k.exit.Lost {
		return "exit status lost"
	}
	es := child.ExitStatus(k.exit.Status)
	if es.Signal != "" {
		return fmt.Sprintf("killed by %s", es.Signal)
	}
	return fmt.Sprintf("exit code %d", es.ExitCode)
}

// send writes one request line.
func (k *kernel) send(req codeRequest) error {
	var data []byte
	if k.bash {
		data = []byte(bashRequest(req))
	} else {
		var err error
		if data, err = json.Marshal(req); err != nil {
			return err
		}
	}
	_, err := k.toK.Write(append(data, '\n'))
	return err
}

// bashRequest is the bash kernel's request line: the code, a snippet that
// sets the run's env vars and one that restores them, each base64 ("-" for
// none). Keys were checked by validBashEnv.
func bashRequest(req codeRequest) string {
	b64 := func(s string) string {
		if s == "" {
			return "-"
		}
		return base64.StdEncoding.EncodeToString([]byte(s))
	}
	keys := make([]string, 0, len(req.Env))
	for k := range req.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var pre, post strings.Builder
	for i, k := range keys {
		saved := fmt.Sprintf("__berth_saved%d", i)
		set := "export " + k + "=" + child.ShellQuote(req.Env[k])
		if req.Env[k] == api.EnvUnset {
			set = "unset " + k // null: unset for this run
		}
		fmt.Fprintf(&pre, "if [[ -v %s ]]; then %s=(1 \"$%s\"); else %s=(); fi; %s\n", k, saved, k, saved, set)
		fmt.Fprintf(&post, "if ((${#%s[@]})); then export %s=\"${%s[1]}\"; else unset %s; fi; unset %s\n", saved, k, saved, k, saved)
	}
	return b64(req.Code) + " " + b64(pre.String()) + " " + b64(post.String())
}

// validBashEnv reports the first env key bash cannot hold as a variable.
func validBashEnv(env map[string]string) (string, bool) {
	for k := range env {
		if !child.ValidShellName(k) {
			return k, false
		}
	}
	return "", true
}
