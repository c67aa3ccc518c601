package agent

import "strings"

// shellWords are the builtins and reserved words that `exec` cannot run
// (or would run differently, as a binary of the same name).
var shellWords = map[string]bool{
	"!": true, "{": true, "}": true, "case": true, "do": true, "done": true, "elif": true, "else": true,
	"esac": true, "fi": true, "for": true, "function": true, "if": true, "in": true, "then": true,
	"until": true, "while": true, "select": true, "time": true, "[[": true,
	".": true, ":": true, "alias": true, "bg": true, "break": true, "builtin": true, "cd": true,
	"command": true, "continue": true, "declare": true, "eval": true, "exec": true, "exit": true,
	"export": true, "fg": true, "getopts": true, "hash": true, "jobs": true, "local": true,
	"read": true, "readonly": true, "return": true, "set": true, "shift": true, "source": true,
	"times": true, "trap": true, "type": true, "typeset": true, "ulimit": true, "umask": true,
	"unalias": true, "unset": true, "wait": true,
}

// execCommand returns command with an `exec ` prefix when it is one simple
// command (no unquoted control operator, a plain command name first), so
// that /bin/sh replaces itself with the command and a background process's
// record (its pid, its signals, its exit status) is the user's program, not
// the shell wrapper. Anything else is returned unchanged; its record then
// follows the whole process group (see process.run).
func execCommand(command string) string {
	first := true // still in the first word
	name := strings.Builder{}
	var quote byte
	for i := 0; i < len(command); i++ {
		c := command[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			}
			continue
		case c == '\\':
			if first {
				return command
			}
			i++
			continue
		case quote == '"':
			if c == '"' {
				quote = 0
			} else if c == '`' || c == '$' && i+1 < len(command) && command[i+1] == '(' {
				return command // a command substitution may hold anything
			}
			continue
		}
		switch c {
		case '\'', '"':
			if first {
				return command
			}
			quote = c
		case ';', '&', '|', '(', ')', '\n', '`', '#':
			return command
		case '$':
			if first || i+1 < len(command) && command[i+1] == '(' {
				return command
			}
		case ' ', '\t':
			if first && name.Len() > 0 {
				first = false
			}
		case '<', '>', '=', '*', '?', '[', '~', '{', '}', '!':
			if first {
				return command
			}
		default:
			if first {
				name.WriteByte(c)
			}
		}
	}
	if quote != 0 || name.Len() == 0 || shellWords[name.String()] {
		return command
	}
	return "exec " + command
}
