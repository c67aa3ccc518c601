package durable

// EvictIdle exposes evictIdle to the external tests.
func (h *Host) EvictIdle() { h.evictIdle() }
