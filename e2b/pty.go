package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"

	"connectrpc.com/connect"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	pb "github.com/berth-sh/berth/e2b/envdpb/process"
	"github.com/berth-sh/berth/internal/errdefs"
)

func decodeB64(s string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(s)
	}
	return string(b), err
}

// ptyInput is a terminal connection kept open to carry SendInput bytes and
// resizes; what the agent sends on it is read and dropped.
type ptyInput struct {
	conn   *websocket.Conn
	cancel context.CancelFunc
}

func (e *procEntry) closeInput() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.input != nil {
		e.input.cancel()
		e.input.conn.Close(websocket.StatusNormalClosure, "")
		e.input = nil
	}
}

// ptyInput writes data (or a control message) to the terminal, attaching
// the input connection on first use.
func (s *processService) ptyInput(ctx context.Context, ag *agentclient.Client, e *procEntry, data []byte, ctl *api.TerminalControl) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.input == nil {
		cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		conn, err := ag.AttachTerminal(cctx, e.agentID, agentclient.AttachOptions{})
		if err != nil {
			cancel()
			return err
		}
		go func() {
			for {
				if _, _, err := conn.Read(cctx); err != nil {
					return
				}
			}
		}()
		e.input = &ptyInput{conn: conn, cancel: cancel}
	}
	var err error
	if ctl != nil {
		b, _ := json.Marshal(ctl)
		err = e.input.conn.Write(ctx, websocket.MessageText, b)
	} else {
		err = e.input.conn.Write(ctx, websocket.MessageBinary, data)
	}
	if err != nil {
		e.input.cancel()
		e.input = nil
		return errdefs.Unavailable("terminal input: %w", err)
	}
	return nil
}

// startPTY starts a terminal (an agent PTY running cmd as user) and
// streams its output as pty data events.
func (s *processService) startPTY(ctx context.Context, req *connect.Request[pb.StartRequest], user string, send func(*pb.ProcessEvent) error) error {
	id := sandboxFrom(ctx)
	cfg := req.Msg.Process
	tr := api.CreateTerminalRequest{ID: randID("e2bpty-"), Shell: cfg.Cmd, Env: cfg.Envs, User: user, Cwd: homeDir}
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		tr.Cwd = resolvePath(*cfg.Cwd)
	}
	if sz := req.Msg.Pty.Size; sz != nil {
		tr.Cols, tr.Rows = int(sz.Cols), int(sz.Rows)
	}
	e := &procEntry{agentID: tr.ID, pty: true, config: cfg}
	if req.Msg.Tag != nil {
		e.tag = *req.Msg.Tag
	}
	return s.stream(ctx, req.Header(), send, func(ctx context.Context, es *eventSender) (*pb.ProcessEvent, error) {
		ag, release, err := s.h.agent(ctx, id)
		if err != nil {
			return nil, err
		}
		defer release()
		t, err := ag.CreateTerminal(ctx, tr)
		if err != nil {
			return nil, err
		}
		conn, err := ag.AttachTerminal(ctx, t.ID, agentclient.AttachOptions{})
		if err != nil {
			_ = ag.DeleteTerminal(context.WithoutCancel(ctx), t.ID)
			return nil, err
		}
		defer conn.CloseNow()
		e.pid = uint32(t.Pid)
		s.h.procs.add(id, e)
		if err := es.event(startEvent(e.pid)); err != nil {
			return nil, err
		}
		end, err := pumpTerminal(ctx, conn, es)
		if err == nil {
			s.h.procs.remove(id, e.pid) // the shell exited
		}
		return end, err
	})
}

// connectPTY attaches to a running terminal: its scrollback, then live
// output.
func (s *processService) connectPTY(ctx context.Context, hdr http.Header, e *procEntry, send func(*pb.ProcessEvent) error) error {
	id := sandboxFrom(ctx)
	return s.stream(ctx, hdr, send, func(ctx context.Context, es *eventSender) (*pb.ProcessEvent, error) {
		ag, release, err := s.h.agent(ctx, id)
		if err != nil {
			return nil, err
		}
		defer release()
		conn, err := ag.AttachTerminal(ctx, e.agentID, agentclient.AttachOptions{})
		if err != nil {
			return nil, err
		}
		defer conn.CloseNow()
		if err := es.event(startEvent(e.pid)); err != nil {
			return nil, err
		}
		end, err := pumpTerminal(ctx, conn, es)
		if err == nil {
			s.h.procs.remove(id, e.pid)
		}
		return end, err
	})
}

// pumpTerminal copies a terminal connection's output to es until the
// terminal exits; it returns the end event.
func pumpTerminal(ctx context.Context, conn *websocket.Conn, es *eventSender) (*pb.ProcessEvent, error) {
	for {
		typ, p, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, errdefs.Unavailable("terminal stream ended: %w", err)
		}
		if typ == websocket.MessageBinary {
			if _, err := (dataWriter{s: es, pty: true}).Write(p); err != nil {
				return nil, err
			}
			continue
		}
		var ctl api.TerminalControl
		if json.Unmarshal(p, &ctl) != nil {
			continue
		}
		switch ctl.Type {
		case api.TerminalExit:
			es := api.ExitStatus{Signal: ctl.Signal}
			if ctl.Code != nil {
				es.ExitCode = *ctl.Code
			}
			return endEvent(es), nil
		case api.TerminalError:
			return nil, errdefs.Unavailable("terminal: %s", ctl.Message)
		}
	}
}
