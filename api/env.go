package api

import "encoding/json"

// Env is the environment a request sets: exec, session create and patch,
// process start, sandbox create. A JSON null value means "unset" (as in
// the Cloudflare SDK): the variable is removed from what the command would
// otherwise inherit (the image's and the sandbox's env, a session's
// exports), where an empty string sets it to "". In Go an unset variable
// has the value EnvUnset.
type Env map[string]string

// EnvUnset is the Go value of a variable sent as null. A real value cannot
// contain a NUL byte (every entry point refuses one), so it is never a
// value.
const EnvUnset = "\x00"

// MarshalJSON writes unset variables as null.
func (e Env) MarshalJSON() ([]byte, error) {
	if e == nil {
		return []byte("null"), nil
	}
	m := make(map[string]*string, len(e))
	for k, v := range e {
		if v == EnvUnset {
			m[k] = nil
		} else {
			m[k] = &v
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads null values as EnvUnset.
func (e *Env) UnmarshalJSON(b []byte) error {
	var m map[string]*string
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if m == nil {
		*e = nil
		return nil
	}
	out := make(Env, len(m))
	for k, v := range m {
		if v == nil {
			out[k] = EnvUnset
		} else {
			out[k] = *v
		}
	}
	*e = out
	return nil
}

// ApplyTo sets e's variables in m and deletes its unset ones.
func (e Env) ApplyTo(m map[string]string) {
	for k, v := range e {
		if v == EnvUnset {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
}
