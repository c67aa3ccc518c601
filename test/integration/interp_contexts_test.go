//go:build integration

package integration

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestCodeContextUserAndCwd: contexts of every language run as the
// requested user (root too) in the requested cwd, and the default contexts
// are listed before the first run.
func TestCodeContextUserAndCwd(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "it-ctxuser"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	list, err := d.c.ListCodeContexts(ctx, "it-ctxuser")
	if err != nil {
		t.Fatal(err)
	}
	langs := map[string]bool{}
	for _, c := range list {
		langs[c.Language] = true
	}
	if !langs[api.LangPython] || !langs[api.LangJavaScript] {
		t.Fatalf("default contexts before the first run: %+v", list)
	}
	probes := map[string]string{
		"python":     "import os, pwd\nprint(pwd.getpwuid(os.getuid()).pw_name, os.getcwd())",
		"javascript": "console.log(require('os').userInfo().username, process.cwd())",
		"typescript": "const u: string = require('os').userInfo().username; console.log(u, process.cwd())",
		"bash":       "echo $(id -un) $PWD",
	}
	for lang, code := range probes {
		for _, c := range []struct{ user, cwd, want string }{
			{"root", "/tmp", "root /tmp"},
			{"", "", "user /home/user"},
			{"root", "", "root /root"},
			{"user", "/etc", "user /etc"},
		} {
			cc, err := d.c.CreateCodeContext(ctx, "it-ctxuser", api.CreateCodeContextRequest{Language: lang, User: c.user, Cwd: c.cwd})
			if err != nil {
				t.Fatalf("%s as %q in %q: %v", lang, c.user, c.cwd, err)
			}
			if cc.User != strings.Fields(c.want)[0] || cc.Cwd != strings.Fields(c.want)[1] {
				t.Errorf("%s context record %+v, want %s", lang, cc, c.want)
			}
			res, err := d.c.RunCode(ctx, "it-ctxuser", api.RunCodeRequest{Context: cc.ID, Code: code, TimeoutMs: 60000}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(strings.Join(res.Logs.Stdout, "")); got != c.want || res.Error != nil {
				t.Errorf("%s as %q in %q: got %q (error %+v), want %q", lang, c.user, c.cwd, got, res.Error, c.want)
			}
			_ = d.c.DeleteCodeContext(ctx, "it-ctxuser", cc.ID)
		}
	}
}

// TestCodeRunSilentTimeoutAndKill: a cell that prints nothing still ends
// at its timeout, the context survives the interrupt, and a sandbox
// destroyed mid-cell ends the run with an error instead of a hang.
func TestCodeRunSilentTimeoutAndKill(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "it-ctxkill"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, lang := range []string{"python", "javascript", "bash"} {
		code := map[string]string{"python": "import time\ntime.sleep(60)", "javascript": "await new Promise(() => {})", "bash": "sleep 60"}[lang]
		start := time.Now()
		res, err := d.c.RunCode(ctx, "it-ctxkill", api.RunCodeRequest{Language: lang, Code: code, TimeoutMs: 1500}, nil)
		if err != nil {
			t.Fatalf("%s: %v", lang, err)
		}
		if res.Error == nil || time.Since(start) > 20*time.Second {
			t.Fatalf("%s: silent cell after %s: %+v", lang, time.Since(start), res)
		}
		again, err := d.c.RunCode(ctx, "it-ctxkill", api.RunCodeRequest{Language: lang, Code: map[string]string{"python": "1+1", "javascript": "1+1", "bash": "echo 2"}[lang]}, nil)
		if err != nil || again.Error != nil || (mainText(again) != "2" && strings.TrimSpace(strings.Join(again.Logs.Stdout, "")) != "2") {
			t.Fatalf("%s after the interrupt: %+v %v", lang, again, err)
		}
	}
	// The native stream answers at once, before the silent cell prints.
	key, err := os.ReadFile(filepath.Join(dataDir, "api-key"))
	if err != nil {
		t.Fatal(err)
	}
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.c.BaseURL()+"/v1/sandboxes/it-ctxkill/code/run",
		strings.NewReader(`{"code":"import time\ntime.sleep(8)","timeoutMs":20000}`))
	hreq.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); resp.StatusCode != http.StatusOK || took > 4*time.Second {
		t.Fatalf("native run stream: status %d after %s, want 200 at once", resp.StatusCode, took)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	done := make(chan error, 1)
	go func() {
		_, err := d.c.RunCode(ctx, "it-ctxkill", api.RunCodeRequest{Code: "import time\ntime.sleep(120)"}, nil)
		done <- err
	}()
	time.Sleep(2 * time.Second)
	if err := d.c.Destroy(ctx, "it-ctxkill"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a run in a destroyed sandbox succeeded")
		}
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("run in a destroyed sandbox: %v, want Unavailable", err)
		}
		t.Logf("run in a destroyed sandbox: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("a run in a destroyed sandbox hangs")
	}
}

func mainText(r api.CodeRunResult) string {
	for _, x := range r.Results {
		if x.IsMainResult {
			return x.Text
		}
	}
	return ""
}
