package exposure

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// ErrStale is returned by a resolver for a URL made in an earlier run of a
// sandbox that has since restarted (or is sleeping). It is answered with
// 410 Gone and must not wake the sandbox; exposing the port again makes a
// URL for the current run.
var ErrStale = errors.New("preview URL is from an earlier run of the sandbox")

// Exposure is one exposed port of a sandbox.
type Exposure struct {
	Sandbox   string
	Port      int
	Name      string
	Token     string
	Private   bool   // requires "Authorization: Bearer <API key>"
	RunID     string // the sandbox run it was made in
	CreatedAt time.Time
}

func (e Exposure) String() string {
	return fmt.Sprintf("port %d of sandbox %q", e.Port, e.Sandbox)
}

// DialFunc opens one new connection to the exposed port.
type DialFunc = func(ctx context.Context) (net.Conn, error)

// TokenLen is the length of a token NewToken makes.
const TokenLen = 16

const tokenAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewToken returns a random token of TokenLen characters from [a-z0-9]
// (about 82 bits), drawn without modulo bias.
func NewToken() string {
	var out [TokenLen]byte
	var buf [32]byte
	n := 0
	for n < TokenLen {
		if _, err := rand.Read(buf[:]); err != nil {
			panic(err) // crypto/rand never fails on Linux ≥ 3.17
		}
		for _, b := range buf {
			// 252 is the largest multiple of 36 below 256.
			if b < 252 && n < TokenLen {
				out[n] = tokenAlphabet[int(b)%len(tokenAlphabet)]
				n++
			}
		}
	}
	return string(out[:])
}

// Bounds of a caller-chosen token (CheckToken). The lower bound keeps a
// public URL from being guessed; the upper one keeps the host label short.
const (
	MinTokenLen = 8
	MaxTokenLen = 32
)

// CheckToken validates a caller-chosen token: MinTokenLen to MaxTokenLen
// characters from [a-z0-9] (a host name label; '-' separates the label's
// parts). Its error, invalid argument, names the rule.
func CheckToken(s string) error {
	if len(s) < MinTokenLen || len(s) > MaxTokenLen {
		return errdefs.InvalidArgument("preview token must be %d to %d characters from [a-z0-9], got %d characters", MinTokenLen, MaxTokenLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(tokenAlphabet, rune(s[i])) {
			return errdefs.InvalidArgument("preview token must be %d to %d characters from [a-z0-9]; %q is not allowed", MinTokenLen, MaxTokenLen, s[i])
		}
	}
	return nil
}
