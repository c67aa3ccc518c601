package network

import "github.com/berth-sh/berth/internal/weaken"

// weakHoles maps the daemon's test-only switches (BERTH_TEST_WEAKEN) onto
// the rule sets they lift, for the adversarial suite's negative controls:
// egress lifts the host-input rules and the private/link-local/metadata
// drop; sandbox-isolate lifts the rules between sandboxes (and, in
// lifecycle.go, bridge port isolation). Without the variable it is empty.
func weakHoles() holes {
	var h holes
	if weaken.Off(weaken.Egress) {
		h.input, h.never = true, true
	}
	if weaken.Off(weaken.SandboxIsolate) {
		h.forwardBr, h.inbound, h.never = true, true, true
	}
	return h
}
