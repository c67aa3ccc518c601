package api_test

import (
	"encoding/json"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestEnvNullIsUnset: a JSON null value decodes to EnvUnset and encodes
// back as null; "" stays a value (issue 12 item 9).
func TestEnvNullIsUnset(t *testing.T) {
	var req api.ExecRequest
	if err := json.Unmarshal([]byte(`{"command":"x","env":{"A":"1","B":null,"C":""}}`), &req); err != nil {
		t.Fatal(err)
	}
	if req.Env["A"] != "1" || req.Env["B"] != api.EnvUnset || req.Env["C"] != "" || len(req.Env) != 3 {
		t.Fatalf("decoded %q", req.Env)
	}
	b, err := json.Marshal(req.Env)
	if err != nil || string(b) != `{"A":"1","B":null,"C":""}` {
		t.Fatalf("encoded %s %v", b, err)
	}
	m := map[string]string{"B": "inherited", "D": "kept"}
	req.Env.ApplyTo(m)
	if _, ok := m["B"]; ok || m["A"] != "1" || m["C"] != "" || m["D"] != "kept" {
		t.Fatalf("applied: %q", m)
	}
	var none api.ExecRequest
	if err := json.Unmarshal([]byte(`{"command":"x","env":null}`), &none); err != nil || none.Env != nil {
		t.Fatalf("env null: %v %v", none.Env, err)
	}
}
