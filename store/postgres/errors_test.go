package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berth-sh/berth/internal/errdefs"
)

// TestErrorKinds is the SQLSTATE and connection-failure → errdefs table,
// without a server; the tests against a real one show the same errors
// arising (TestDiskFull, TestServerStopAndRestart, TestOpenUnreachable).
func TestErrorKinds(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("query: %w", &pgconn.PgError{Code: code, Message: "m"}) }
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		err  error
		ctx  context.Context
		want error
	}{
		{pg("23505"), nil, errdefs.ErrAlreadyExists},
		{pg("53100"), nil, errdefs.ErrNoSpace},
		{pg("57P01"), nil, errdefs.ErrUnavailable},
		{pg("57P03"), nil, errdefs.ErrUnavailable},
		{pg("53300"), nil, errdefs.ErrUnavailable},
		{pg("25006"), nil, errdefs.ErrUnavailable},
		{pg("40001"), nil, errdefs.ErrUnavailable}, // only once the retries are spent
		{pg("08006"), nil, errdefs.ErrUnavailable},
		{pg("28P01"), nil, errdefs.ErrUnavailable},
		{pg("3D000"), nil, errdefs.ErrUnavailable},
		{pg("42601"), nil, errdefs.ErrInternal}, // a syntax error is a bug, not an outage
		{pg("23502"), nil, errdefs.ErrInternal},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), nil, errdefs.ErrUnavailable},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), nil, errdefs.ErrUnavailable},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), nil, errdefs.ErrUnavailable},
		{context.DeadlineExceeded, canceled, errdefs.ErrDeadlineExceeded},
		{errors.New("cannot scan into *int"), nil, errdefs.ErrInternal},
		{errdefs.NotFound("x"), nil, errdefs.ErrNotFound},
	} {
		ctx := c.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		got := fail(ctx, c.err, "op")
		if !errdefs.IsKind(got, c.want) || !errors.Is(got, c.err) || !strings.HasPrefix(got.Error(), "op: ") {
			t.Errorf("%v: got %v (kind %v), want kind %v with the cause kept", c.err, got, errdefs.Kind(got), c.want)
		}
	}
	if !retryable(pg("40001")) || !retryable(pg("40P01")) || retryable(pg("23505")) || retryable(pg("57P01")) {
		t.Error("only serialization failures and deadlocks are retried (and what never reached the server)")
	}
}
