package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/coder/websocket"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/berth-sh/berth/api"
)

// pipedEOF is typed when piped stdin ends. Not ^D: a ^D that reaches the
// pty while it is in canonical mode (before bash's line editor starts, or
// while a command runs) becomes an end-of-line marker that is lost when
// the line editor switches the pty to raw mode, and the shell would never
// exit. A typed command survives every mode switch.
const pipedEOF = "exit\n"

func (a *app) shellCmd() *cobra.Command {
	var id string
	cmd := &cobra.Command{
		Use:   "shell NAME [--id ID]",
		Short: "Open an interactive shell in a sandbox",
		Long: `Open an interactive shell (bash if the image has it) on a terminal in the
sandbox, waking it if it sleeps. Your terminal is put in raw mode, so
Ctrl-C, Ctrl-Z, arrow keys and full-screen programs (vim, top) go to the
sandbox; window resizes follow. Leave with 'exit' or Ctrl-D: berth exits
with the shell's exit status and restores your terminal.

The terminal outlives the connection: if you are disconnected, run the same
command again to reattach, and its recent output (up to 256 KiB) is
replayed. Several 'berth shell' with the same --id share one terminal; use
another --id for an independent one. A terminal whose shell has exited
starts afresh on the next attach.

Without a terminal on stdin (a pipe), stdin is typed into the shell and
'exit' is typed at its end, so the shell ends with the last command's
status.

Examples:
  berth shell dev
  berth shell dev --id build
  printf 'cd /srv && make\nexit $?\n' | berth shell dev --id ci`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runShell(cmd.Context(), args[0], id)
		},
	}
	cmd.Flags().StringVar(&id, "id", "shell", "terminal id (letters, digits, '.', '_', '-')")
	return cmd
}

func (a *app) runShell(ctx context.Context, name, id string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	inFile, inTTY := a.stdin.(*os.File)
	inTTY = inTTY && term.IsTerminal(int(inFile.Fd()))
	outFD := -1
	if f, ok := a.stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		outFD = int(f.Fd())
	}
	cols, rows := 0, 0
	if outFD >= 0 {
		if w, h, err := term.GetSize(outFD); err == nil {
			cols, rows = w, h
		}
	}
	conn, err := c.AttachTerminal(ctx, name, id, cols, rows)
	if err != nil {
		return err
	}
	defer conn.CloseNow()
	if inTTY {
		old, err := term.MakeRaw(int(inFile.Fd()))
		if err != nil {
			return fmt.Errorf("putting the terminal in raw mode: %w", err)
		}
		// Restore on every way out, panics included: a terminal left raw
		// is unusable until the user types 'reset' blind.
		defer term.Restore(int(inFile.Fd()), old)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if outFD >= 0 {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-winch:
					if w, h, err := term.GetSize(outFD); err == nil {
						msg, _ := json.Marshal(api.TerminalControl{Type: api.TerminalResize, Cols: w, Rows: h})
						_ = conn.Write(ctx, websocket.MessageText, msg)
					}
				}
			}
		}()
	}

	// stdin → binary frames. A read from a terminal cannot be
	// interrupted; when the shell ends first, this goroutine is simply
	// left blocked until berth exits.
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := a.stdin.Read(buf)
			if n > 0 {
				if conn.Write(ctx, websocket.MessageBinary, buf[:n]) != nil {
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) && !inTTY {
					_ = conn.Write(ctx, websocket.MessageBinary, []byte(pipedEOF))
				}
				return
			}
		}
	}()

	// binary frames → stdout; control messages handled.
	for {
		typ, p, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("terminal connection lost before the shell exited: %w", err)
		}
		if typ == websocket.MessageBinary {
			if _, err := a.stdout.Write(p); err != nil {
				return fmt.Errorf("writing to stdout: %w", err)
			}
			continue
		}
		var ctl api.TerminalControl
		if json.Unmarshal(p, &ctl) != nil {
			continue
		}
		switch ctl.Type {
		case api.TerminalExit:
			conn.Close(websocket.StatusNormalClosure, "")
			st := api.ExitStatus{Signal: ctl.Signal}
			if ctl.Code != nil {
				st.ExitCode = *ctl.Code
			}
			code, err := exitStatus(st)
			if err != nil {
				return err
			}
			if code != 0 {
				return exitCode(code)
			}
			return nil
		case api.TerminalError:
			// Shown in-line, as a terminal would; the session goes on.
			fmt.Fprintf(a.stderr, "\r\nberth: %s\r\n", ctl.Message)
		}
	}
}
