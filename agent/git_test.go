package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// gtRepo makes a bare repository with branches main and feature and
// returns its file:// URL.
func gtRepo(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	work := filepath.Join(dir, "work")
	bare := filepath.Join(dir, "project.git")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "README"), []byte("main\n"), 0o644)
	git("-C", work, "add", "README")
	git("-C", work, "commit", "-q", "-m", "first")
	git("-C", work, "checkout", "-q", "-b", "feature")
	os.WriteFile(filepath.Join(work, "FEATURE"), []byte("f\n"), 0o644)
	git("-C", work, "add", "FEATURE")
	git("-C", work, "commit", "-q", "-m", "feature")
	git("init", "-q", "--bare", "-b", "main", bare)
	git("-C", work, "push", "-q", bare, "main", "feature")
	return "file://" + bare
}

func TestGitCheckout(t *testing.T) {
	a, c := newClient(t)
	ctx := ptCtx(t)
	url := gtRepo(t, a.Dir)

	// Default target: ~/<repo name>, default branch.
	res, err := c.GitCheckout(ctx, api.GitCheckoutRequest{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if res.TargetDir != filepath.Join(a.Home, "project") || res.Branch != "main" || !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(res.Commit) {
		t.Fatalf("result %+v", res)
	}
	if data, err := os.ReadFile(filepath.Join(a.Home, "project", "README")); err != nil || string(data) != "main\n" {
		t.Fatalf("README: %q %v", data, err)
	}
	// A branch, a depth and a target.
	target := filepath.Join(a.Dir, "feat")
	res, err = c.GitCheckout(ctx, api.GitCheckoutRequest{URL: url, Branch: "feature", Depth: 1, TargetDir: target})
	if err != nil || res.Branch != "feature" || res.TargetDir != target {
		t.Fatalf("branch: %+v %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(target, "FEATURE")); err != nil {
		t.Fatal(err)
	}
	// Distinct errors.
	_, err = c.GitCheckout(ctx, api.GitCheckoutRequest{URL: url, Branch: "nope", TargetDir: filepath.Join(a.Dir, "x1")})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `branch "nope" not found`) {
		t.Fatalf("missing branch: %v", err)
	}
	_, err = c.GitCheckout(ctx, api.GitCheckoutRequest{URL: "file://" + a.Dir + "/missing.git"})
	if !errors.Is(err, errdefs.ErrNotFound) || strings.Contains(err.Error(), "branch") {
		t.Fatalf("missing repo: %v", err)
	}
	_, err = c.GitCheckout(ctx, api.GitCheckoutRequest{URL: url, TargetDir: target})
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("existing target: %v", err)
	}
	// Nothing listens on port 1 of loopback: a network error.
	_, err = c.GitCheckout(ctx, api.GitCheckoutRequest{URL: "http://127.0.0.1:1/x.git", TargetDir: filepath.Join(a.Dir, "x2")})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("network: %v", err)
	}
	for _, bad := range []string{"", "ftp://h/x", "/abs/path", "ext::sh -c id"} {
		if _, err := c.GitCheckout(ctx, api.GitCheckoutRequest{URL: bad}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("url %q: %v", bad, err)
		}
	}
	if _, err := c.GitCheckout(ctx, api.GitCheckoutRequest{URL: url, Branch: "--upload-pack=x"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("option as branch: %v", err)
	}
}

// TestGitCheckoutRejectsOptionInjection: a URL that git would take as an
// option runs a command (--upload-pack). The negative control shows the
// probe does run it when passed to git unchecked.
func TestGitCheckoutRejectsOptionInjection(t *testing.T) {
	a, c := newClient(t)
	url := gtRepo(t, a.Dir)
	mark := filepath.Join(a.Dir, "pwned")
	inject := "--upload-pack=touch " + mark + ";git-upload-pack"

	out, _ := exec.Command("git", "clone", "-q", inject, url, filepath.Join(a.Dir, "ctl")).CombinedOutput()
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("negative control: unchecked git did not run the injected command (%s); the probe proves nothing", out)
	}
	os.Remove(mark)

	// Straight to the agent, past the client's own check.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", a.Socket)
	}}}
	for _, u := range []string{inject, "-u touch " + mark, "ssh://-oProxyCommand=touch%20" + mark + "/x"} {
		body, _ := json.Marshal(api.GitCheckoutRequest{URL: u, TargetDir: filepath.Join(a.Dir, "t")})
		resp, err := hc.Post("http://agent/v1/git/checkout", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Code != "invalid_argument" {
			t.Errorf("agent accepted %q: %d %+v", u, resp.StatusCode, e)
		}
		if _, err := c.GitCheckout(ptCtx(t), api.GitCheckoutRequest{URL: u}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("client: %q: %v", u, err)
		}
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the injected command ran")
	}
}

// TestGitCheckoutTimeoutLeavesNoTarget: a clone killed on its timeout
// (a git server that accepts and never answers) leaves no partial target,
// so a retry is not refused with "already exists"; the control shows git
// itself had made the directory.
func TestGitCheckoutTimeoutLeavesNoTarget(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	a, c := newClient(t)
	ctx := ptCtx(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- struct{}{}:
			default:
			}
			defer conn.Close() // held open, never answered
		}
	}()
	target := filepath.Join(a.Dir, "stalled")
	_, err = c.GitCheckout(ctx, api.GitCheckoutRequest{URL: "git://" + ln.Addr().String() + "/x.git", TargetDir: target, TimeoutMs: 1500})
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) {
		t.Fatalf("stalled clone: %v", err)
	}
	select {
	case <-accepted: // git had connected, so it had made its target first
	default:
		t.Fatal("git never connected to the stalled server")
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the killed clone left its target behind: %v", err)
	}
}
