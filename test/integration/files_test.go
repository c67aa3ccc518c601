//go:build integration

package integration

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// TestNativeFilesAsAProgram checks the native files API in a real sandbox
// (overlayfs, the agent as PID 1): an overwrite keeps inode, mode and owner
// and a watch sees create then modify, never a temp name; root's relative
// paths are in /root; a session's relative paths are in its cwd; reads are
// typed; dot files can be hidden; type=file refuses a directory.
func TestNativeFilesAsAProgram(t *testing.T) {
	const sb = "it-files"
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: sb})
	sh := func(command string) string {
		t.Helper()
		res, err := d.c.Exec(ctx, sb, api.ExecRequest{Command: command, User: "root", TimeoutMs: 120000})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %+v %v", command, res, err)
		}
		return res.Stdout
	}
	sh("mkdir -p /home/user/w && printf '#!/bin/sh\\necho v1\\n' > /home/user/w/run.sh && chmod 755 /home/user/w/run.sh")
	before := sh("stat -c '%i %a %U' /home/user/w/run.sh")

	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	events := make(chan api.WatchEvent, 64)
	started := make(chan struct{})
	go func() {
		_ = d.c.Watch(wctx, sb, "/home/user/w", client.WatchOptions{Recursive: true}, func(e api.WatchEvent) error {
			if e.Type == "watching" {
				close(started)
			}
			events <- e
			return nil
		})
	}()
	select {
	case <-started:
	case <-wctx.Done():
		t.Fatal("watch not established")
	}
	if err := d.c.WriteFile(ctx, sb, "/home/user/w/run.sh", strings.NewReader("#!/bin/sh\necho v2\n"), 0); err != nil {
		t.Fatal(err)
	}
	if err := d.c.WriteFile(ctx, sb, "/home/user/w/new.txt", strings.NewReader("fresh"), 0); err != nil {
		t.Fatal(err)
	}
	sh("mkdir /home/user/w/mark")
	var seen []string
	got := map[string]bool{}
wait:
	for {
		select {
		case e := <-events:
			if e.Type != "event" {
				continue
			}
			seen = append(seen, e.EventType+" "+e.Path)
			got[e.EventType+" "+e.Path] = true
			if e.Path == "/home/user/w/mark" {
				break wait
			}
		case <-wctx.Done():
			t.Fatalf("no event for the marker; saw %v", seen)
		}
	}
	for _, s := range seen {
		if !strings.HasSuffix(s, "/run.sh") && !strings.HasSuffix(s, "/new.txt") && !strings.HasSuffix(s, "/mark") {
			t.Errorf("event on a name nobody wrote: %s (all: %v)", s, seen)
		}
		if strings.HasPrefix(s, "move_") {
			t.Errorf("a write showed as a move: %s", s)
		}
	}
	if !got["modify /home/user/w/run.sh"] || got["create /home/user/w/run.sh"] || !got["create /home/user/w/new.txt"] {
		t.Fatalf("want modify run.sh and create new.txt only; saw %v", seen)
	}
	if after := sh("stat -c '%i %a %U' /home/user/w/run.sh"); after != before {
		t.Fatalf("inode, mode or owner changed: %q → %q", before, after)
	}
	if out := sh("/home/user/w/run.sh"); out != "v2\n" {
		t.Fatalf("run.sh says %q", out)
	}

	// Root's relative paths are in /root.
	rctx := client.WithFileOptions(ctx, client.FileOptions{User: "root"})
	if err := d.c.WriteFile(rctx, sb, "hello.txt", strings.NewReader("as root"), 0); err != nil {
		t.Fatal(err)
	}
	if out := sh("cat /root/hello.txt"); out != "as root" {
		t.Fatalf("/root/hello.txt: %q", out)
	}
	if fi, err := d.c.Stat(rctx, sb, "hello.txt"); err != nil || fi.Path != "/root/hello.txt" || fi.UID != 0 {
		t.Fatalf("stat as root: %+v %v", fi, err)
	}

	// A session's relative paths are in its cwd.
	if _, err := d.c.CreateSession(ctx, sb, api.CreateSessionRequest{ID: "fs1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.SessionExec(ctx, sb, "fs1", api.ExecRequest{Command: "mkdir -p /tmp/proj/src && cd /tmp/proj/src"}); err != nil {
		t.Fatal(err)
	}
	sctx := client.WithFileOptions(ctx, client.FileOptions{Session: "fs1"})
	if err := d.c.WriteFile(sctx, sb, "main.py", strings.NewReader("print(1)\n"), 0); err != nil {
		t.Fatal(err)
	}
	if out := sh("cat /tmp/proj/src/main.py"); out != "print(1)\n" {
		t.Fatalf("main.py in the session's cwd: %q", out)
	}

	// Typed reads and metadata.
	rc, err := d.c.ReadFile(sctx, sb, "main.py")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	fi, err := d.c.Stat(sctx, sb, "main.py")
	if err != nil || fi.MimeType != "text/x-python; charset=utf-8" || fi.Binary {
		t.Fatalf("stat main.py: %+v %v", fi, err)
	}
	fi, err = d.c.Stat(ctx, sb, "/usr/bin/ls")
	if err != nil || !fi.Binary || fi.MimeType != "application/octet-stream" {
		t.Fatalf("stat /usr/bin/ls: %+v %v", fi, err)
	}

	// Hidden files and a file-only delete.
	sh("mkdir -p /tmp/h/.git /tmp/h/empty && touch /tmp/h/.env /tmp/h/a")
	hctx := client.WithFileOptions(ctx, client.FileOptions{HideDotFiles: true})
	files, err := d.c.ListFiles(hctx, sb, "/tmp/h", true)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	if strings.Join(names, " ") != "a empty" {
		t.Fatalf("listing without dot files: %v", names)
	}
	fctx := client.WithFileOptions(ctx, client.FileOptions{FilesOnly: true})
	if err := d.c.Remove(fctx, sb, "/tmp/h/empty", false); err == nil {
		t.Fatal("a file-only delete removed a directory")
	}
	if err := d.c.Remove(fctx, sb, "/tmp/h/a", false); err != nil {
		t.Fatal(err)
	}
	if out := sh("ls -A /tmp/h | tr '\\n' ' '"); out != ".env .git empty " {
		t.Fatalf("left in /tmp/h: %q", out)
	}
}
