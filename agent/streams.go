package agent

import (
	"github.com/berth-sh/berth/agent/terminal"
	"github.com/berth-sh/berth/agent/watch"
)

// addStreamRoutes registers the long-lived endpoints: terminals (WebSocket)
// and file watches (NDJSON stream). Both outlive an ordinary request, and
// http.Server.Shutdown neither waits for hijacked WebSockets nor ends
// streaming handlers, so both are told to stop through RegisterOnShutdown.
func (s *Server) addStreamRoutes() {
	shutdown := make(chan struct{})
	terms := terminal.New(terminal.Config{Prepare: s.prepareCommand, Start: s.startCommand})
	s.http.RegisterOnShutdown(func() {
		close(shutdown)
		terms.CloseAll()
	})
	s.mux.HandleFunc("POST /v1/terminals", terms.HandleCreate)
	s.mux.HandleFunc("GET /v1/terminals", terms.HandleList)
	s.mux.HandleFunc("DELETE /v1/terminals/{id}", terms.HandleDelete)
	s.mux.HandleFunc("GET /v1/terminals/{id}/ws", terms.HandleAttach)
	w := watch.New(watch.Config{Path: s.pathParam, Heartbeat: s.cfg.HeartbeatInterval, Shutdown: shutdown})
	s.mux.HandleFunc("GET /v1/watch", w.Handle)
}
