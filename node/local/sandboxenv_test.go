package local

import (
	"slices"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestSandboxEnvNullUnsets: a null (api.EnvUnset) in a sandbox's env
// removes the image's variable instead of setting it to "" (issue 12 item
// 9); "" still sets an empty value.
func TestSandboxEnvNullUnsets(t *testing.T) {
	got := sandboxEnv([]string{"PATH=/bin", "IMAGE_VAR=from-image", "KEEP=k"}, nil,
		map[string]string{"IMAGE_VAR": api.EnvUnset, "EMPTY": "", "NEVER": api.EnvUnset}, "sb")
	want := []string{"BERTH_SANDBOX=sb", "EMPTY=", "KEEP=k", "PATH=/bin"}
	if !slices.Equal(got, want) {
		t.Fatalf("sandboxEnv = %q, want %q", got, want)
	}
}
