package postgres

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berth-sh/berth/internal/errdefs"
)

// SQLSTATE codes the store branches on (PostgreSQL's appendix A).
const (
	codeUniqueViolation      = "23505"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeDiskFull             = "53100"
	codeOutOfMemory          = "53200"
	codeTooManyConnections   = "53300"
	codeAdminShutdown        = "57P01"
	codeCrashShutdown        = "57P02"
	codeCannotConnectNow     = "57P03"
	codeReadOnlyTransaction  = "25006" // a standby, or a primary demoted in a failover
)

// maxAttempts bounds how often one call runs when the server asks for a
// retry (serialization failure, deadlock) or the statement provably never
// reached it (pgconn.SafeToRetry: a pooled connection found dead before
// use).
const maxAttempts = 8

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func isDuplicate(err error) bool { return pgCode(err) == codeUniqueViolation }

// retryable reports whether running the same call again is both safe and
// likely to help.
func retryable(err error) bool {
	switch pgCode(err) {
	case codeSerializationFailure, codeDeadlockDetected:
		return true // the whole transaction was rolled back
	}
	return pgconn.SafeToRetry(err)
}

// retry runs fn until it succeeds, fails for good, or maxAttempts runs
// are spent; it returns fn's last error unclassified.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt == maxAttempts || !retryable(err) || ctx.Err() != nil {
			return err
		}
		s.retries.Add(1)
		// Exponential with full jitter (5 ms, 10 ms, ... at most 0.64 s
		// over all attempts), so processes that collided spread out
		// instead of colliding again in lockstep.
		base := 5 * time.Millisecond << (attempt - 1)
		d := base/2 + rand.N(base)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(d):
		}
	}
}

// kindOf maps a pgx error to an errdefs kind.
func kindOf(ctx context.Context, err error) error {
	if k := errdefs.Kind(err); k != nil {
		return k // already classified (by this package or a caller)
	}
	switch pgCode(err) {
	case "":
	case codeUniqueViolation:
		return errdefs.ErrAlreadyExists
	case codeDiskFull:
		return errdefs.ErrNoSpace
	case codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow, codeTooManyConnections,
		codeOutOfMemory, codeReadOnlyTransaction, codeSerializationFailure, codeDeadlockDetected:
		// The server is going away, starting, full of sessions, or kept
		// refusing to serialize us: worth retrying later, so 503.
		return errdefs.ErrUnavailable
	default:
		switch class := pgCode(err) + "  "; class[:2] {
		case "08", // connection exception
			"28", // invalid authorization (a rotated password, a dropped role)
			"3D": // the database does not exist (dropped under us)
			// The store cannot be used until the operator acts; for
			// the API's callers that is 503, not their mistake.
			return errdefs.ErrUnavailable
		}
		return errdefs.ErrInternal
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err):
		if ctx.Err() != nil {
			return errdefs.ErrDeadlineExceeded // the caller's deadline
		}
		return errdefs.ErrUnavailable // a connect or ping timeout of the pool's own
	case errors.Is(err, context.Canceled):
		return errdefs.ErrUnavailable
	case isConnectionLoss(err):
		return errdefs.ErrUnavailable
	}
	return errdefs.ErrInternal
}

// isConnectionLoss reports whether err says the server could not be
// reached or the connection broke: refused, reset, closed mid-query,
// unresolvable host.
func isConnectionLoss(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		pgconn.SafeToRetry(err)
}

// fail wraps a database error as an errdefs error of its kind, keeping it
// as the cause; what names the operation ("get sandbox \"a\""). The
// unavailable and no-space messages say what the operator should know.
func fail(ctx context.Context, err error, what string) error {
	if err == nil {
		return nil
	}
	k := kindOf(ctx, err)
	if errdefs.Kind(err) != nil {
		return errdefs.New(k, "%s: %w", what, err)
	}
	switch k {
	case errdefs.ErrUnavailable:
		return errdefs.New(k, "%s: the state store (PostgreSQL) is unavailable: %w", what, err)
	case errdefs.ErrNoSpace:
		return errdefs.New(k, "%s: the state store's disk is full (PostgreSQL: %w); free space on the database server and retry", what, err)
	}
	return errdefs.New(k, "%s: %w", what, err)
}
