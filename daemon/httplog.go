package daemon

import (
	"log/slog"
	"net/http"
	"os"
	"strings"
	"syscall"

	"golang.org/x/term"
)

// shownKey is the API key as `berth serve` prints it at start: whole on a
// terminal (the operator is looking at it), and only its first characters
// otherwise, because stderr is then usually a log file (scripts/up.sh
// appends it to /var/log/berth.log) that more people and tools read than
// the 0600 key files. The whole key stays in <data>/api-key and
// <data>/client.json.
func shownKey(key string, terminal bool) string {
	if terminal {
		return key
	}
	const keep = 8
	if len(key) <= keep {
		return "<redacted> (read it from the key file)"
	}
	return key[:keep] + "… (redacted: stderr is not a terminal; the whole key is in the key files below)"
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// requestLogger returns the request log (slog text lines on stderr) for
// the --request-log mode: "all" (default), "errors" or "off".
func requestLogger(mode string) *slog.Logger {
	level := slog.LevelInfo
	switch mode {
	case "off":
		return nil
	case "errors":
		level = slog.LevelWarn // Guard logs 4xx at warn and 5xx at error
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// logTenant names the tenant of a request for its log line when the
// handler recorded none (the E2B face), from the key it sent.
func logTenant(resolve func(string) (string, bool)) func(*http.Request) string {
	if resolve == nil {
		return nil
	}
	return func(r *http.Request) string {
		key := r.Header.Get("X-API-Key")
		if key == "" {
			if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
				key = strings.TrimSpace(a[7:])
			}
		}
		if key == "" {
			return ""
		}
		t, _ := resolve(key)
		return t
	}
}

func orDefault(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// nofile is the soft RLIMIT_NOFILE. Go raises it to the hard limit when
// the process starts (and restores the original for the programs it runs),
// so the daemon already has every fd the host grants it; LimitListener
// keeps a reserve of them for its own work.
func nofile() uint64 {
	var rl syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	return rl.Cur
}
