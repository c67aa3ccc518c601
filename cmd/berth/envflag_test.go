package main

import (
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestParseEnvUnset: --unset-env sends a null (api.EnvUnset) for the name;
// one name both set and unset is refused (issue 12 item 9).
func TestParseEnvUnset(t *testing.T) {
	env, err := parseEnv([]string{"A=1", "B="}, []string{"C"})
	if err != nil || len(env) != 3 || env["A"] != "1" || env["B"] != "" || env["C"] != api.EnvUnset {
		t.Fatalf("%q %v", env, err)
	}
	if env, err := parseEnv(nil, nil); err != nil || env != nil {
		t.Fatalf("no flags: %q %v", env, err)
	}
	if _, err := parseEnv([]string{"A=1"}, []string{"A"}); err == nil {
		t.Fatal("set and unset accepted")
	}
}
