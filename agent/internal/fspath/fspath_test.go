package fspath

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestResolvePath(t *testing.T) {
	cases := []struct {
		in, want string
		bad      bool
	}{
		{"/etc/passwd", "/etc/passwd", false},
		{"notes.txt", "/home/u/notes.txt", false},
		{"../../../etc", "/etc", false}, // lexical; the kernel confines it to the sandbox root anyway
		{"/a/./b//c/", "/a/b/c", false},
		{"", "", true},
		{"a\x00b", "", true},
		{"\xff\xfe", "", true},
		{"/" + strings.Repeat("a", 4096), "", true},
	}
	for _, tc := range cases {
		got, err := Resolve(tc.in, "/home/u")
		if tc.bad != (err != nil) || got != tc.want {
			t.Errorf("Resolve(%q) = %q, %v", tc.in, got, err)
		}
		if tc.bad && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Resolve(%q): kind %v", tc.in, err)
		}
	}
}

func TestErrorKinds(t *testing.T) {
	cases := map[syscall.Errno]error{
		syscall.ENOENT:    errdefs.ErrNotFound,
		syscall.EEXIST:    errdefs.ErrAlreadyExists,
		syscall.ENOTDIR:   errdefs.ErrInvalidArgument,
		syscall.EISDIR:    errdefs.ErrInvalidArgument,
		syscall.EACCES:    errdefs.ErrPermissionDenied,
		syscall.EPERM:     errdefs.ErrPermissionDenied,
		syscall.ENOSPC:    errdefs.ErrResourceExhausted,
		syscall.EDQUOT:    errdefs.ErrResourceExhausted,
		syscall.ENOTEMPTY: errdefs.ErrFailedPrecondition,
	}
	for errno, kind := range cases {
		err := Error("write", "/x", &os.PathError{Op: "open", Path: "/x", Err: errno})
		if !errors.Is(err, kind) {
			t.Errorf("%v: got %v", errno, err)
		}
	}
	if err := Error("write", "/x", syscall.ENOSPC); !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("ENOSPC message: %v", err)
	}
}
