package agent

// addStreamRoutes registers the long-lived endpoints: terminals (WebSocket)
// and file watches (NDJSON stream). Both outlive an ordinary request, and
// http.Server.Shutdown neither waits for hijacked WebSockets nor ends
// streaming handlers, so both are told to stop through RegisterOnShutdown.
func (s *Server) addStreamRoutes() {
	shutdown := make(chan struct{})
	terms := newTerminals(s)
	s.http.RegisterOnShutdown(func() {
		close(shutdown)
		terms.closeAll()
	})
	s.mux.HandleFunc("POST /v1/terminals", terms.handleCreate)
	s.mux.HandleFunc("GET /v1/terminals", terms.handleList)
	s.mux.HandleFunc("DELETE /v1/terminals/{id}", terms.handleDelete)
	s.mux.HandleFunc("GET /v1/terminals/{id}/ws", terms.handleAttach)
	w := &watchService{s: s, shutdown: shutdown, budget: newWatchBudget()}
	s.mux.HandleFunc("GET /v1/watch", w.handleWatch)
}
