package browser

import "testing"

// The detector is the browser test's only judge of success, so it gets its
// own negative controls: the typed command, a prompt and a host name with
// the digits in them must not count as the answer.
func TestAnswerLine(t *testing.T) {
	const cmd = "echo $((6*7))"
	cases := []struct {
		name  string
		lines []string
		want  int
	}{
		{"empty screen", nil, -1},
		{"prompt only", []string{"user@web-42:~$ "}, -1},
		{"command typed, not run", []string{"user@web-42:~$ " + cmd, ""}, -1},
		{"command without arithmetic", []string{"$ echo 42x", "42x"}, -1},
		{"answer printed", []string{"user@web-42:~$ " + cmd, "42", "user@web-42:~$ "}, 1},
		{"answer with trailing blanks", []string{"$ " + cmd, "42    "}, 1},
	}
	for _, c := range cases {
		if got := answerLine(c.lines, "42"); got != c.want {
			t.Errorf("%s: answerLine = %d, want %d", c.name, got, c.want)
		}
	}
	if got := lineContaining([]string{"a", "$ " + cmd}, cmd); got != 1 {
		t.Errorf("lineContaining = %d, want 1", got)
	}
}
