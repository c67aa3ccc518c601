package server

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/egress"
)

// decoders are the API's JSON request decoders with their validators, as
// the handlers run them: strict decode, then validate.
var decoders = []struct {
	name  string
	check func(data []byte) (any, error)
}{
	{"exec", decodeValidate(func(r *api.ExecRequest) error { return validateExec(r) })},
	{"start-process", decodeValidate(func(r *api.StartProcessRequest) error { return validateStartProcess(r) })},
	{"session", decodeValidate(func(r *api.CreateSessionRequest) error { return validateCreateSession(r) })},
	{"wait-log", decodeValidate(func(r *api.WaitLogRequest) error { return validateWaitLog(r) })},
	{"wait-port", decodeValidate(func(r *api.WaitPortRequest) error { return validateWaitPort(r) })},
	{"git-checkout", decodeValidate(func(r *api.GitCheckoutRequest) error { return validateGitCheckout(r) })},
	{"terminal", decodeValidate(func(r *api.CreateTerminalRequest) error { return validateCreateTerminal(r) })},
	{"snapshot", decodeValidate(func(r *api.SnapshotRequest) error { return validateSnapshotRequest(r) })},
	{"fork", decodeValidate(func(r *api.ForkRequest) error { return validateFork(r) })},
	{"backup", decodeValidate(func(r *api.BackupRequest) error { return validateBackup(r) })},
	{"restore", decodeValidate(func(r *api.RestoreBackupRequest) error { return validateRestore(r) })},
	{"network-policy", decodeValidate(func(r *api.NetworkPolicy) error { _, err := egress.Compile(*r); return err })},
}

func decodeValidate[T any](validate func(*T) error) func([]byte) (any, error) {
	return func(data []byte) (any, error) {
		var v T
		if err := decodeJSON(bytes.NewReader(data), &v, false); err != nil {
			return nil, err
		}
		return &v, validate(&v)
	}
}

// FuzzDecodeRequests feeds arbitrary bodies to every JSON request decoder
// of the API (the first byte picks the decoder). None may panic, and what
// one accepts must survive a round trip: its re-encoding is accepted too,
// so nothing downstream sees a request the API could not have produced.
// Seeds live in testdata/fuzz/FuzzDecodeRequests.
func FuzzDecodeRequests(f *testing.F) {
	for i, seed := range []string{
		`{"argv":["ls","-l"],"cwd":"/tmp","env":{"A":"b"},"user":"root","timeoutMs":1000}`,
		`{"command":"npm run dev","id":"web","cwd":"/home/user","logBufferBytes":4096}`,
		`{"id":"s1"}`,
		`{"pattern":"ready","regex":true,"timeoutMs":5}`,
		`{"port":8080,"mode":"http","path":"/","statusMin":200,"statusMax":399}`,
		`{"url":"https://example.com/x.git","path":"/home/user/x"}`,
		`{"cols":80,"rows":24}`,
		`{"name":"snap"}`,
		`{"name":"child"}`,
		`{}`,
		`{"name":"x"}`,
	} {
		f.Add(byte(i), []byte(seed))
	}
	f.Add(byte(0), []byte(`{"argv":["a\u0000b"]}`))
	f.Add(byte(0), []byte(`{"argv":[]} {}`))
	f.Add(byte(1), []byte(`{"command":"x","timeoutMs":-1}`))
	f.Add(byte(11), []byte(`{}`))
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		d := decoders[int(which)%len(decoders)]
		v, err := d.check(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: accepted %q but cannot re-encode it: %v", d.name, data, err)
		}
		if _, err := d.check(again); err != nil {
			t.Fatalf("%s: accepted %q but rejected its re-encoding %s: %v", d.name, data, again, err)
		}
	})
}
