package server

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// terminalAttachTimeout bounds the WebSocket handshake with the agent.
const terminalAttachTimeout = 30 * time.Second

func (s *server) createTerminal(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.CreateTerminalRequest
	if err := s.readJSON(w, r, &req, true); err != nil {
		return err
	}
	if err := validateCreateTerminal(&req); err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		t, err := ag.CreateTerminal(r.Context(), req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, t)
		return nil
	})
}

func (s *server) listTerminals(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		list, err := ag.ListTerminals(r.Context())
		if err != nil {
			return err
		}
		if list == nil {
			list = []api.Terminal{}
		}
		writeJSON(w, http.StatusOK, api.TerminalList{Terminals: list})
		return nil
	})
}

func (s *server) deleteTerminal(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := validateTermID(id); err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		if err := ag.DeleteTerminal(r.Context(), id); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// terminalWS relays a user's WebSocket to the agent's terminal WebSocket.
//
// Order matters. The Origin is checked first, before anything is woken or
// created: a page on another origin must not be able to drive a terminal
// through a victim's browser (cross-site WebSocket hijacking; browsers send
// cookies and, for the console, the page holds the key). Then the agent
// side is attached, so that a missing terminal or a dead sandbox is still
// an ordinary JSON error with its status; only then is the user's socket
// accepted.
func (s *server) terminalWS(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := validateTermID(id); err != nil {
		return err
	}
	cols, err := queryInt(r, "cols", 0, maxTerminalSize)
	if err != nil {
		return err
	}
	rows, err := queryInt(r, "rows", 0, maxTerminalSize)
	if err != nil {
		return err
	}
	create, err := queryBool(r, "create")
	if err != nil {
		return err
	}
	if !isWebSocketUpgrade(r) {
		return errdefs.InvalidArgument("%s is a WebSocket endpoint: send a GET with Upgrade: websocket", r.URL.Path)
	}
	if err := checkSameOrigin(r); err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		actx, cancel := context.WithTimeout(r.Context(), terminalAttachTimeout)
		agentConn, err := ag.AttachTerminal(actx, id, agentclient.AttachOptions{Create: create, Cols: cols, Rows: rows})
		cancel()
		if err != nil {
			return err
		}
		// Default options: the library refuses an Origin whose host differs
		// from the request's Host with 403 (checked above already; this is
		// the second lock). The console is served from the same origin.
		userConn, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			agentConn.Close(websocket.StatusGoingAway, "")
			return nil // Accept has answered the request
		}
		// The relay outlives nothing but this handler; the hijacked
		// connection is not tied to r.Context, so end of either side ends it.
		if err := agentclient.ProxyTerminal(r.Context(), userConn, agentConn); err != nil && !errors.Is(err, context.Canceled) {
			s.opts.Logf("terminal %s/%s: %v", name, id, err)
		}
		return nil
	})
}

// checkSameOrigin refuses a browser request whose Origin is not the host it
// was sent to (the same rule websocket.Accept applies by default). Requests
// without Origin are from non-browser clients, which cannot be driven by a
// foreign page.
func checkSameOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return errdefs.PermissionDenied("cross-origin WebSocket refused: Origin %q does not match host %q", origin, r.Host)
	}
	return nil
}

// isWebSocketUpgrade reports whether r asks for a WebSocket.
func isWebSocketUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet &&
		headerHasToken(r.Header, "Connection", "upgrade") &&
		headerHasToken(r.Header, "Upgrade", "websocket")
}

func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
