package e2b

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
)

// DefaultTemplates maps E2B's stock template IDs to berth images.
// debian-trixie carries Python's data stack (numpy, pandas, matplotlib), so
// it also serves code-interpreter-v1.
func DefaultTemplates() map[string]string {
	return map[string]string{
		"base":                "debian-trixie",
		"code-interpreter-v1": "debian-trixie",
	}
}

var templateIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// LoadTemplates reads a JSON object {"template-id": "image", …} and merges it
// over DefaultTemplates. A missing file is not an error.
func LoadTemplates(path string) (map[string]string, error) {
	t := DefaultTemplates()
	if path == "" {
		return t, nil
	}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("E2B templates file %s: %w", path, err)
	}
	for k, v := range m {
		if !templateIDRE.MatchString(k) || v == "" {
			return nil, fmt.Errorf("E2B templates file %s: invalid entry %q: %q", path, k, v)
		}
		t[k] = v
	}
	return t, nil
}
