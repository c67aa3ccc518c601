package server

import (
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestValidateEnvNull: a null env value (api.EnvUnset) passes validation as
// "unset", where a NUL inside a value is still refused (issue 12 item 9).
func TestValidateEnvNull(t *testing.T) {
	if err := validateEnv("env", api.Env{"A": api.EnvUnset}); err != nil {
		t.Fatalf("null value: %v", err)
	}
	if err := validateEnv("env", api.Env{"A": "x\x00y"}); err == nil {
		t.Fatal("a NUL inside a value was accepted")
	}
	if err := validateUpdateSession(&api.UpdateSessionRequest{}); err == nil {
		t.Fatal("an empty session update was accepted")
	}
	neg := int64(-1)
	if err := validateUpdateSession(&api.UpdateSessionRequest{DefaultTimeoutMs: &neg}); err == nil {
		t.Fatal("a negative default timeout was accepted")
	}
}
