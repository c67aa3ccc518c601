package agent

import (
	"strings"
	"testing"
)

// TestLogArgvTruncated: a sudo command line is logged cut to
// maxLoggedArgv bytes with its length (issue 12 C).
func TestLogArgvTruncated(t *testing.T) {
	if got := logArgv([]string{"true", "a"}); got != `["true" "a"]` {
		t.Fatalf("short argv logged as %s", got)
	}
	got := logArgv([]string{"true", strings.Repeat("a", 30000)})
	if len(got) > maxLoggedArgv+32 || !strings.HasSuffix(got, "… (30011 bytes)") {
		t.Fatalf("30 KB argv logged as %d bytes: %.80s…%s", len(got), got, got[len(got)-20:])
	}
}

// TestExecCommand: only one simple command with a plain name gets the exec
// prefix (issue 12 item 8).
func TestExecCommand(t *testing.T) {
	for cmd, exec := range map[string]bool{
		"sleep 100":                     true,
		"python3 -m http.server 8080":   true,
		`sh -c 'trap "" TERM; sleep 1'`: true,
		`node server.js "$PORT" > log`:  true,
		"./run.sh --flag=x":             true,
		"cd / && sleep 1":               false,
		"sleep 1; echo x":               false,
		"sleep 1 &":                     false,
		"a | b":                         false,
		"FOO=1 sleep 1":                 false,
		"export X=1":                    false,
		"cd /tmp":                       false,
		"wait":                          false,
		"$CMD arg":                      false,
		"echo $(date; id)":              false,
		"while :; do :; done":           false,
		"(sleep 1)":                     false,
		"{ sleep 1; }":                  false,
		"echo 'unterminated":            false,
		"sleep 1 # comment":             false,
		"2>/dev/null sleep 1":           false,
		"echo `id`":                     false,
		"echo \"$(id)\"":                false,
		"":                              false,
	} {
		got := execCommand(cmd)
		if want := map[bool]string{true: "exec " + cmd, false: cmd}[exec]; got != want {
			t.Errorf("execCommand(%q) = %q, want %q", cmd, got, want)
		}
	}
}
