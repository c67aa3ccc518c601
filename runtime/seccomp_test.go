package runtime

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// verdict is what the profile does with a call of name whose arguments no
// argument rule matches: allow, or the errno it fails with.
func verdict(s *specs.LinuxSeccomp, name string) (allowed bool, errno uint) {
	for _, sc := range s.Syscalls {
		if len(sc.Args) > 0 {
			continue
		}
		for _, n := range sc.Names {
			if n != name {
				continue
			}
			if sc.Action == specs.ActAllow {
				return true, 0
			}
			return false, *sc.ErrnoRet
		}
	}
	return false, *s.DefaultErrnoRet
}

// TestSeccompAllowsEverydayCalls: the calls that shells, coreutils,
// package managers and language runtimes make on every machine are
// allowed whatever their arguments. rmdir was missing from the allowlist
// (`rmdir d` failed with ENOSYS in every sandbox); the container
// ecosystem's default profile allows it. The blocked calls are the
// control: they fail with EPERM, and a call the profile does not know
// fails with ENOSYS.
func TestSeccompAllowsEverydayCalls(t *testing.T) {
	s := Seccomp()
	for _, name := range []string{
		"rmdir", "mkdir", "mkdirat", "unlink", "unlinkat", "rename", "renameat2",
		"link", "symlink", "readlink", "chmod", "fchmodat", "chown", "fchownat",
		"truncate", "ftruncate", "utimensat", "statx", "newfstatat", "getdents64",
		"openat", "openat2", "close_range", "copy_file_range", "sendfile",
		"pipe2", "dup3", "wait4", "waitid", "execve", "vfork", "kill",
		"inotify_init1", "epoll_pwait2", "memfd_create", "rseq", "prlimit64",
	} {
		if ok, errno := verdict(s, name); !ok {
			t.Errorf("%s is not allowed (fails with %v)", name, unix.Errno(errno))
		}
	}
	for _, name := range []string{"mount", "setns", "bpf", "keyctl", "io_uring_setup"} {
		if ok, errno := verdict(s, name); ok || unix.Errno(errno) != unix.EPERM {
			t.Errorf("blocked %s: allowed %v, errno %v; want EPERM", name, ok, unix.Errno(errno))
		}
	}
	if ok, errno := verdict(s, "tuxcall"); ok || unix.Errno(errno) != unix.ENOSYS {
		t.Errorf("an unknown call: allowed %v, errno %v; want ENOSYS", ok, unix.Errno(errno))
	}
}
