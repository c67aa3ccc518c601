package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// berth's sudo. Sandboxes run with no_new_privs, so the setuid sudo cannot
// raise privileges (the kernel ignores the setuid bit), and a user
// namespace changes nothing there. Instead `sudo` inside the sandbox is the
// agent binary (bind-mounted read-only over /usr/bin/sudo): it connects to
// the agent's sudo socket, hands over its stdin, stdout and stderr
// (SCM_RIGHTS) with argv, cwd and environment, and the agent (root, PID 1)
// checks the caller's kernel-verified uid (SCM_CREDENTIALS, not forgeable) against
// the image's sudo policy and runs the command as the target user. No
// setuid binary and no privilege-raising exec is involved, so
// no_new_privs stays on for every process.
//
// Policy: root may always; another user may when the image grants them
// passwordless sudo: a NOPASSWD rule naming them or a group of theirs in
// /etc/sudoers or /etc/sudoers.d, or membership of the sudo/wheel group.

// SudoSocket is where the agent listens for sudo. It is on the sandbox's
// own /dev tmpfs (root-owned, 0755, so no user can put a socket there
// first), never in a host-backed directory: under gVisor a socket in a
// bind mount is a host socket, whose peer credentials would name the sentry
// (host root) instead of the calling sandbox user.
const SudoSocket = "/dev/berth-sudo.sock"

// SudoRequest is the first message on the sudo socket, sent with the
// caller's fds 0, 1 and 2.
type SudoRequest struct {
	Argv        []string `json:"argv"` // empty with Shell or Login: the target's shell
	Env         []string `json:"env"`
	Cwd         string   `json:"cwd"`
	User        string   `json:"user"` // target, default root
	Login       bool     `json:"login"`
	Shell       bool     `json:"shell"`
	PreserveEnv bool     `json:"preserveEnv"`
}

// SudoMessage flows both ways after the request: Signal from the client,
// Exit or Error from the agent.
type SudoMessage struct {
	Signal int    `json:"signal,omitempty"`
	Exit   *int   `json:"exit,omitempty"`
	Error  string `json:"error,omitempty"`
}

// ServeSudo accepts sudo requests on ln until it is closed.
func (s *Server) ServeSudo(ln *net.UnixListener) error {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return err
		}
		go s.handleSudo(c)
	}
}

// ListenSudo listens on path, writable by every user of the sandbox.
func ListenSudo(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("agent: %s exists and is not a socket", path)
	}
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, err
	}
	// SO_PASSCRED (inherited by accepted sockets): the kernel attaches the
	// sender's verified credentials to each message (SCM_CREDENTIALS).
	// SO_PEERCRED is not used: gVisor (2024-07) reports uid 0 for every
	// peer there.
	raw, err := ln.SyscallConn()
	if err == nil {
		cerr := raw.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1) })
		if cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent: SO_PASSCRED on %s: %w", path, err)
	}
	return ln, nil
}

const maxSudoRequest = 1 << 20

func (s *Server) handleSudo(c *net.UnixConn) {
	defer c.Close()
	enc := json.NewEncoder(c)
	fail := func(format string, args ...any) {
		_ = enc.Encode(SudoMessage{Error: fmt.Sprintf(format, args...)})
	}
	buf, oob := make([]byte, maxSudoRequest), make([]byte, unix.CmsgSpace(3*4)+unix.CmsgSpace(unix.SizeofUcred))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return
	}
	var fds []int
	var cred *unix.Ucred
	if scms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range scms {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			} else if uc, err := unix.ParseUnixCredentials(&m); err == nil {
				cred = uc
			}
		}
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
		defer unix.Close(fd)
	}
	if len(fds) != 3 {
		fail("sudo: expected 3 descriptors, got %d", len(fds))
		return
	}
	var req SudoRequest
	if err := json.Unmarshal(buf[:n], &req); err != nil {
		fail("sudo: bad request: %v", err)
		return
	}
	if cred == nil {
		fail("sudo: cannot identify the caller (no credentials on the request)")
		return
	}
	caller, err := lookupUser(s.cfg.EtcDir, fmt.Sprint(cred.Uid))
	if err != nil {
		fail("sudo: unknown caller uid %d", cred.Uid)
		return
	}
	if cred.Uid != 0 && !s.maySudo(caller) {
		fail("sudo: %s is not allowed to run sudo in this sandbox (no NOPASSWD rule)", caller.name)
		return
	}
	targetName := req.User
	if targetName == "" {
		targetName = "root"
	}
	target, err := lookupUser(s.cfg.EtcDir, targetName)
	if err != nil {
		fail("sudo: %v", err)
		return
	}
	argv, env, dir := sudoCommand(req, caller, target)
	path := envValue(env, "PATH")
	argv0, err := lookPath(argv[0], path, dir)
	if err != nil {
		fail("sudo: %s: command not found", argv[0])
		return
	}
	attr := &syscall.ProcAttr{
		Dir: dir, Env: env, Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])},
		Sys: &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: target.uid, Gid: target.gid, Groups: target.groups}},
	}
	pid, exitCh, err := s.cfg.Reaper.Start(argv0, argv, attr)
	if err != nil {
		fail("sudo: %s: %v", argv[0], err)
		return
	}
	log.Printf("sudo: %s (uid %d) ran %s as %s", caller.name, cred.Uid, logArgv(argv), target.name)
	go func() { // signals forwarded by the client
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			var m SudoMessage
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Signal > 0 && m.Signal < 65 {
				_ = syscall.Kill(-pid, syscall.Signal(m.Signal))
			}
		}
	}()
	ex := <-exitCh
	code := 255
	switch {
	case ex.Lost:
	case ex.Status.Signaled():
		code = 128 + int(ex.Status.Signal())
	default:
		code = ex.Status.ExitStatus()
	}
	_ = enc.Encode(SudoMessage{Exit: &code})
}

// sudoCommand builds argv, environment and cwd the way sudo does: a reset
// environment (TERM kept) unless PreserveEnv, SUDO_* set, the target's
// shell for -s/-i, the target's home as cwd for -i.
func sudoCommand(req SudoRequest, caller, target account) ([]string, []string, string) {
	shell := "/bin/sh"
	if _, err := os.Stat("/bin/bash"); err == nil {
		shell = "/bin/bash"
	}
	argv := req.Argv
	switch {
	case (req.Login || req.Shell) && len(argv) > 0:
		argv = []string{shell, "-c", strings.Join(argv, " ")}
	case req.Login || req.Shell:
		argv = []string{shell}
	}
	if req.Login {
		argv = append([]string{argv[0], "-l"}, argv[1:]...)
	}
	var env []string
	if req.PreserveEnv {
		env = append(env, req.Env...)
	} else if t := envValue(req.Env, "TERM"); t != "" {
		env = append(env, "TERM="+t)
	}
	env = setEnv(env, "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	env = setEnv(env, "HOME", target.home)
	env = setEnv(env, "USER", target.name)
	env = setEnv(env, "LOGNAME", target.name)
	env = setEnv(env, "SHELL", shell)
	env = setEnv(env, "SUDO_USER", caller.name)
	env = setEnv(env, "SUDO_UID", fmt.Sprint(caller.uid))
	env = setEnv(env, "SUDO_GID", fmt.Sprint(caller.gid))
	env = setEnv(env, "SUDO_COMMAND", strings.Join(req.Argv, " "))
	dir := req.Cwd
	if req.Login || dir == "" || !filepath.IsAbs(dir) {
		dir = target.home
	}
	return argv, env, dir
}

// maySudo applies the image's passwordless sudo policy to a.
func (s *Server) maySudo(a account) bool {
	groups := map[string]bool{}
	group, _ := readEtc(s.cfg.EtcDir, "group")
	forEachLine(group, func(f []string) bool {
		if len(f) >= 4 {
			var gid uint32
			fmt.Sscan(f[2], &gid)
			member := gid == a.gid
			for _, m := range strings.Split(f[3], ",") {
				member = member || m == a.name
			}
			if member {
				groups[f[0]] = true
			}
		}
		return true
	})
	if groups["sudo"] || groups["wheel"] {
		return true
	}
	files := []string{filepath.Join(s.cfg.EtcDir, "sudoers")}
	if more, err := filepath.Glob(filepath.Join(s.cfg.EtcDir, "sudoers.d", "*")); err == nil {
		files = append(files, more...)
	}
	for _, f := range files {
		b, err := readEtc(filepath.Dir(f), filepath.Base(f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 2 || !strings.Contains(line, "NOPASSWD") {
				continue
			}
			who := fields[0]
			if who == a.name || strings.HasPrefix(who, "%") && groups[who[1:]] {
				return true
			}
		}
	}
	return false
}

func envValue(env []string, k string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], k+"="); ok {
			return v
		}
	}
	return ""
}

// errSudoUsage is returned by ParseSudoArgs for a usage error.
var errSudoUsage = errors.New("usage: sudo [-EHins] [-u user] [command [arg ...]]")

// setEnv replaces or adds k in a KEY=VALUE list.
func setEnv(env []string, k, v string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}
