package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/outpipe"
	"github.com/berth-sh/berth/node"
)

// ptyExec runs argv on a pty through the agent's terminals: the command
// becomes the terminal's "shell" (a one-line script that execs argv, so
// there is no interactive shell to echo it), output is the terminal's
// bytes (stdout and stderr merged, as on any tty), stdin is typed in.
func (c compute) ptyExec(ctx context.Context, name string, argv []string, o node.ExecOptions) (node.Process, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "durable-" + hex.EncodeToString(b[:])
	script := "/tmp/.berth-" + id
	body := "#!/bin/sh\nexec " + shellJoin(argv) + "\n"
	ag, release, err := c.m.agent(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := ag.WriteFile(ctx, script, strings.NewReader(body), 0o755); err != nil {
		release()
		return nil, err
	}
	cleanup := func() {
		bg := context.WithoutCancel(ctx)
		_ = ag.DeleteTerminal(bg, id)
		_ = ag.Remove(bg, script, false)
		release()
	}
	if _, err := ag.CreateTerminal(ctx, api.CreateTerminalRequest{ID: id, Shell: script, Cwd: o.Cwd, Env: o.Env, User: o.User}); err != nil {
		cleanup()
		return nil, err
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	conn, err := ag.AttachTerminal(pctx, id, agentclient.AttachOptions{})
	if err != nil {
		cancel()
		cleanup()
		return nil, err
	}
	p := &process{stdout: outpipe.New(maxBufferedExecOutput), stderr: outpipe.New(maxBufferedExecOutput), cancel: cancel, done: make(chan struct{}), code: -1}
	p.stderr.Close() // a tty merges the streams
	go func() {
		defer close(p.done)
		defer cleanup()
		defer p.stdout.Close()
		defer conn.CloseNow()
		if len(o.Stdin) > 0 {
			if err := conn.Write(pctx, websocket.MessageBinary, o.Stdin); err != nil {
				p.err = err
				return
			}
		}
		for {
			typ, data, err := conn.Read(pctx)
			if err != nil {
				p.err = err
				return
			}
			if typ == websocket.MessageBinary {
				_, _ = p.stdout.Write(data)
				continue
			}
			var ctl api.TerminalControl
			if json.Unmarshal(data, &ctl) == nil && ctl.Type == api.TerminalExit {
				if ctl.Code != nil {
					p.code = *ctl.Code
				}
				return
			}
		}
	}()
	return p, nil
}
