package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ParseSudoArgs reads sudo's common options. done reports an option that
// needs no command (-v, -k, -l; -h is a usage error).
func ParseSudoArgs(args []string) (req SudoRequest, done bool, err error) {
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			args = args[1:]
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		args = args[1:]
		if v, ok := strings.CutPrefix(a, "--user="); ok {
			req.User = v
			continue
		}
		switch a {
		case "--preserve-env":
			req.PreserveEnv = true
			continue
		case "--login":
			req.Login = true
			continue
		case "--shell":
			req.Shell = true
			continue
		case "--non-interactive", "--set-home":
			continue
		case "--user":
			if len(args) == 0 {
				return req, false, errSudoUsage
			}
			req.User, args = args[0], args[1:]
			continue
		}
		if strings.HasPrefix(a, "--") {
			return req, false, errSudoUsage
		}
		for i := 1; i < len(a); i++ {
			switch a[i] {
			case 'E':
				req.PreserveEnv = true
			case 'i':
				req.Login = true
			case 's':
				req.Shell = true
			case 'n', 'H', 'S', 'P':
			case 'v', 'k', 'K', 'l':
				done = true
			case 'u':
				if rest := a[i+1:]; rest != "" {
					req.User = rest
				} else if len(args) > 0 {
					req.User, args = args[0], args[1:]
				} else {
					return req, false, errSudoUsage
				}
				i = len(a)
			default:
				return req, false, errSudoUsage
			}
		}
	}
	req.Argv = args
	if !done && len(args) == 0 && !req.Login && !req.Shell {
		return req, false, errSudoUsage
	}
	return req, done, nil
}

// SudoMain is `sudo` inside the sandbox: it asks the agent on socket to
// run the command (see sudo.go) and exits with the command's status.
func SudoMain(args []string, socket string) int {
	req, done, err := ParseSudoArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if done {
		return 0 // -v, -k, -l: there is no password to validate or forget
	}
	req.Env = os.Environ()
	req.Cwd, _ = os.Getwd()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "sudo: cannot reach the berth agent: %v\n", err)
		return 1
	}
	defer c.Close()
	b, _ := json.Marshal(req)
	if _, _, err := c.WriteMsgUnix(b, unix.UnixRights(0, 1, 2), nil); err != nil {
		fmt.Fprintf(os.Stderr, "sudo: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		enc := json.NewEncoder(c)
		for s := range sigs {
			_ = enc.Encode(SudoMessage{Signal: int(s.(syscall.Signal))})
		}
	}()
	dec := json.NewDecoder(io.LimitReader(c, 1<<20))
	for {
		var m SudoMessage
		if err := dec.Decode(&m); err != nil {
			fmt.Fprintf(os.Stderr, "sudo: lost the agent: %v\n", err)
			return 1
		}
		if m.Error != "" {
			fmt.Fprintln(os.Stderr, m.Error)
			return 1
		}
		if m.Exit != nil {
			return *m.Exit
		}
	}
}
