package errdefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"testing"
)

func TestWrapKeepsCauseAndMessage(t *testing.T) {
	cause := &os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}
	v := Unavailable("store %s: %v", "a", cause)
	w := Unavailable("store %s: %w", "a", cause)
	if v.Error() != w.Error() || w.Error() != "store a: write /x: no space left on device" {
		t.Fatalf("messages differ: %%v %q, %%w %q", v, w)
	}
	if errors.Is(v, syscall.ENOSPC) {
		t.Fatalf("a %%v argument must not become the cause")
	}
	if !errors.Is(w, syscall.ENOSPC) || !errors.Is(w, ErrUnavailable) {
		t.Fatalf("%%w: errors.Is must reach the kind and the cause: %#v", w)
	}
	var pe *os.PathError
	if !errors.As(w, &pe) || pe.Path != "/x" {
		t.Fatal("errors.As must reach the cause")
	}
	var e *Error
	if !errors.As(w, &e) || e.Cause != cause {
		t.Fatalf("Cause = %v, want the %%w argument", e.Cause)
	}
}

func TestNilCauseReadsAsPercentV(t *testing.T) {
	var last error
	err := Unavailable("not ready (last error: %w)", last)
	if err.Error() != "not ready (last error: <nil>)" {
		t.Fatalf("message = %q", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Cause != nil {
		t.Fatalf("a nil %%w argument must be no cause: %#v", e)
	}
}

func TestTwoCauses(t *testing.T) {
	err := Internal("a: %w; b: %w", fs.ErrNotExist, syscall.EPERM)
	if err.Error() != "a: file does not exist; b: operation not permitted" {
		t.Fatalf("message = %q", err)
	}
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, syscall.EPERM) {
		t.Fatal("both causes must be reachable")
	}
}

// The kind is the outer error's, never one found in its cause: an
// unavailable error caused by a not-found is unavailable, whatever order the
// code table lists the kinds in.
func TestCodeIsTheOuterKind(t *testing.T) {
	inner := NotFound("sandbox x not found")
	for _, tc := range []struct {
		err        error
		kind       error
		code, wire string
	}{
		{Unavailable("agent: %w", inner), ErrUnavailable, "unavailable", "unavailable"},
		{Internal("load: %w", Expired("backup expired")), ErrInternal, "internal", "internal"},
		{ResourceExhausted("full: %w", NoSpace("disk")), ErrResourceExhausted, "resource_exhausted", "resource_exhausted"},
		{NoSpace("write: %w", InvalidArgument("bad")), ErrNoSpace, "resource_exhausted", "no_space"},
		{Expired("b: %w", Unavailable("x")), ErrExpired, "expired", "expired"},
		{fmt.Errorf("ctx: %w", Unavailable("agent: %w", inner)), ErrUnavailable, "unavailable", "unavailable"},
		{Wrap(ErrPermissionDenied, inner, "denied"), ErrPermissionDenied, "permission_denied", "permission_denied"},
		{Unavailable("gone: %w", context.DeadlineExceeded), ErrUnavailable, "unavailable", "unavailable"},
	} {
		if got := Code(tc.err); got != tc.code {
			t.Errorf("Code(%q) = %s, want %s", tc.err, got, tc.code)
		}
		if got := WireCode(tc.err); got != tc.wire {
			t.Errorf("WireCode(%q) = %s, want %s", tc.err, got, tc.wire)
		}
		if Kind(tc.err) != tc.kind || !IsKind(tc.err, tc.kind) {
			t.Errorf("Kind(%q) = %v, want %v", tc.err, Kind(tc.err), tc.kind)
		}
	}
	outer := Unavailable("agent: %w", inner)
	if IsKind(outer, ErrNotFound) {
		t.Error("IsKind must not see the cause's kind")
	}
	if !errors.Is(outer, ErrNotFound) {
		t.Error("errors.Is reaches the cause's kind (fmt.Errorf semantics)")
	}
}

func TestRefinements(t *testing.T) {
	if !IsKind(Expired("x"), ErrFailedPrecondition) || !errors.Is(Expired("x"), ErrFailedPrecondition) {
		t.Error("expired must refine failed_precondition")
	}
	if !IsKind(NoSpace("x"), ErrResourceExhausted) || IsKind(ResourceExhausted("x"), ErrNoSpace) {
		t.Error("no_space must refine resource_exhausted, not the other way round")
	}
}

func TestCodeWithoutKind(t *testing.T) {
	for err, want := range map[error]string{
		nil:                                   "",
		errors.New("plain"):                   "internal",
		fmt.Errorf("x: %w", context.Canceled): "unavailable",
		context.DeadlineExceeded:              "deadline_exceeded",
	} {
		if got := Code(err); got != want {
			t.Errorf("Code(%v) = %q, want %q", err, got, want)
		}
	}
}

// Every kind survives a wire hop under its wire code; the public code of a
// refinement without its own rebuilds the parent kind.
func TestFromCodeRoundTrip(t *testing.T) {
	for _, k := range Kinds() {
		err := New(k, "m")
		back := FromCode(WireCode(err), "m")
		if Kind(back) != k || back.Error() != "m" {
			t.Errorf("%v: wire round trip gave %v (%v)", k, Kind(back), back)
		}
		pub := FromCode(Code(err), "m")
		if Code(pub) != Code(err) {
			t.Errorf("%v: public round trip gave code %s, want %s", k, Code(pub), Code(err))
		}
	}
	if Kind(FromCode("bogus", "m")) != ErrInternal {
		t.Error("unknown codes must become internal")
	}
}
