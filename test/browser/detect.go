package browser

import "strings"

// answerLine returns the index of the first screen line that is exactly
// answer (ignoring surrounding blanks), or -1. An exact line is what a shell
// prints for `echo $((6*7))`; the echoed command line, a prompt or a host
// name that merely contains the digits does not count, so the check cannot
// pass on the typed input alone.
func answerLine(lines []string, answer string) int {
	for i, l := range lines {
		if strings.TrimSpace(l) == answer {
			return i
		}
	}
	return -1
}

// lineContaining returns the index of the first line containing s, or -1.
func lineContaining(lines []string, s string) int {
	for i, l := range lines {
		if strings.Contains(l, s) {
			return i
		}
	}
	return -1
}
