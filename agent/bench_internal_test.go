package agent

import (
	"syscall"
	"testing"
)

// BenchmarkReaperTrue is fork+exec+reap of /bin/true through the reaper,
// without HTTP or pipes: the floor under BenchmarkExecTrue.
func BenchmarkReaperTrue(b *testing.B) {
	r := NewReaper(false)
	defer r.Stop()
	attr := &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Setpgid: true}}
	for i := 0; i < b.N; i++ {
		_, ch, err := r.Start("/bin/true", []string{"true"}, attr)
		if err != nil {
			b.Fatal(err)
		}
		<-ch
	}
}

// BenchmarkRawForkWaitTrue is the same with a direct wait4, no SIGCHLD.
func BenchmarkRawForkWaitTrue(b *testing.B) {
	attr := &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Setpgid: true}}
	for i := 0; i < b.N; i++ {
		pid, err := syscall.ForkExec("/bin/true", []string{"true"}, attr)
		if err != nil {
			b.Fatal(err)
		}
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	}
}
