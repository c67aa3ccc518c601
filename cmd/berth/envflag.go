package main

import (
	"fmt"

	"github.com/berth-sh/berth/api"
)

// unsetEnvHelp is the help of --unset-env.
const unsetEnvHelp = "unset this inherited environment variable (repeatable; sent as null)"

// parseEnv builds a request's env from --env KEY=VALUE and --unset-env KEY
// (a null value: the variable is removed from what the command inherits).
func parseEnv(set, unset []string) (api.Env, error) {
	m, err := parseKV("env", set)
	if err != nil {
		return nil, err
	}
	for _, k := range unset {
		if k == "" {
			return nil, fmt.Errorf("--unset-env: empty name")
		}
		if _, ok := m[k]; ok {
			return nil, fmt.Errorf("%s is both set (--env) and unset (--unset-env)", k)
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = api.EnvUnset
	}
	return m, nil
}
