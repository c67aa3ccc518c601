// Package adversarial is berth's adversarial suite (build tag adversarial,
// root): known container escapes and denial-of-service attacks run by a
// static probe (./probe) inside real sandboxes of a `berth serve` that the
// suite starts itself, each with a negative control that switches the one
// protection off (internal/weaken, BERTH_TEST_WEAKEN on the daemon) and
// shows the probe detects the hole. docs/THREAT_MODEL.md links every
// threat to its test here.
//
//	BERTH_BIN=$PWD/bin go test -count=1 -tags adversarial -v ./test/adversarial/
//
// BERTH_IT_ID (a digit) gives the suite its own bridge (berthadv<ID>),
// subnet (10.22<ID>.0.0/16; 10.220 without an id), run dir and data dir; BERTH_ADV_DATA
// overrides the data dir (CI points it at the integration suite's, whose
// base image is then reused).
package adversarial
