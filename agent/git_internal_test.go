package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Real git (2.39) and GitHub/GitLab messages, as git prints them with
// LC_ALL=C.
func TestClassifyGitError(t *testing.T) {
	cases := []struct {
		stderr string
		kind   error
		want   string // substring of the message
	}{
		{"warning: Could not find remote branch nope to clone.\nfatal: Remote branch nope not found in upstream origin\n", errdefs.ErrNotFound, `branch "nope" not found`},
		{"fatal: Remote branch nope not found in upstream origin\n", errdefs.ErrNotFound, `branch "nope" not found`},
		{"fatal: '/tmp/gt/nonexist.git' does not appear to be a git repository\nfatal: Could not read from remote repository.\n\nPlease make sure you have the correct access rights\nand the repository exists.\n", errdefs.ErrNotFound, "not found"},
		{"remote: Repository not found.\nfatal: repository 'https://github.com/berth-sh/nope.git/' not found\n", errdefs.ErrNotFound, "not found"},
		{"ERROR: Repository not found.\nfatal: Could not read from remote repository.\n\nPlease make sure you have the correct access rights\nand the repository exists.\n", errdefs.ErrNotFound, "not found"},
		{"remote: The project you were looking for could not be found or you don't have permission to view it.\nfatal: repository 'https://gitlab.com/a/b.git/' not found\n", errdefs.ErrNotFound, "not found"},
		{"fatal: unable to access 'https://example.com/x.git/': The requested URL returned error: 404\n", errdefs.ErrNotFound, "not found"},
		{"fatal: destination path 'w' already exists and is not an empty directory.\n", errdefs.ErrAlreadyExists, "already exists"},
		{"fatal: could not read Username for 'https://github.com': terminal prompts disabled\n", errdefs.ErrUnauthenticated, "authentication"},
		{"remote: Invalid username or password.\nfatal: Authentication failed for 'https://github.com/a/b.git/'\n", errdefs.ErrUnauthenticated, "authentication"},
		{"git@github.com: Permission denied (publickey).\nfatal: Could not read from remote repository.\n\nPlease make sure you have the correct access rights\nand the repository exists.\n", errdefs.ErrUnauthenticated, "authentication"},
		{"Host key verification failed.\nfatal: Could not read from remote repository.\n", errdefs.ErrUnauthenticated, "authentication"},
		{"fatal: unable to access 'https://example.com/x.git/': The requested URL returned error: 401\n", errdefs.ErrUnauthenticated, "authentication"},
		{"remote: Permission to a/b.git denied to someone.\nfatal: unable to access 'https://github.com/a/b.git/': The requested URL returned error: 403\n", errdefs.ErrPermissionDenied, "denied"},
		{"fatal: unable to access 'http://127.0.0.1:1/x.git/': Failed to connect to 127.0.0.1 port 1 after 0 ms: Couldn't connect to server\n", errdefs.ErrUnavailable, "cannot reach"},
		{"fatal: unable to access 'https://nonexistent.invalid/x.git/': Could not resolve host: nonexistent.invalid\n", errdefs.ErrUnavailable, "cannot reach"},
		{"ssh: Could not resolve hostname nowhere: Name or service not known\nfatal: Could not read from remote repository.\n", errdefs.ErrUnavailable, "cannot reach"},
		{"ssh: connect to host 10.0.0.1 port 22: Connection timed out\nfatal: Could not read from remote repository.\n", errdefs.ErrUnavailable, "cannot reach"},
		{"fatal: unable to access 'https://x/': SSL certificate problem: self-signed certificate\n", errdefs.ErrUnavailable, "cannot reach"},
		{"error: RPC failed; curl 92 HTTP/2 stream 0 was not closed cleanly\nfatal: early EOF\nfatal: fetch-pack: invalid index-pack output\n", errdefs.ErrUnavailable, "cannot reach"},
		{"fatal: could not create work tree dir '/root/x': Permission denied\n", errdefs.ErrPermissionDenied, "permission denied"},
		{"fatal: write error: No space left on device\nfatal: fetch-pack: invalid index-pack output\n", errdefs.ErrResourceExhausted, "no space"},
		{"fatal: transport 'ext' not allowed\n", errdefs.ErrInvalidArgument, "cannot use"},
		{"fatal: Unable to find remote helper for 'foo'\n", errdefs.ErrInvalidArgument, "cannot use"},
		{"fatal: something nobody has seen before\n", errdefs.ErrInternal, "exit code 128"},
	}
	for _, tc := range cases {
		err := classifyGitError("URL", "nope", "/target", tc.stderr, 128)
		if !errors.Is(err, tc.kind) || !strings.Contains(strings.ToLower(err.Error()), tc.want) {
			t.Errorf("%q:\n got %v (%s), want %v containing %q", tc.stderr, err, errdefs.Code(err), tc.kind, tc.want)
		}
	}
}

func TestCheckGitURL(t *testing.T) {
	good := []string{
		"https://github.com/a/b.git", "http://127.0.0.1:8080/x", "git://host/x.git", "ssh://git@host:22/a/b",
		"git+ssh://host/x", "file:///srv/repo.git", "git@github.com:a/b.git", "host:path/x.git",
	}
	bad := []string{
		"", "-u", "--upload-pack=touch /tmp/x", "ext::sh -c touch% /tmp/x", "fd::17", "ftp://host/x",
		"ssh://-oProxyCommand=x/y", "ssh://-user@host/x", "/srv/repo.git", "relative/path", "https://a b/c",
		"https://host/x\n", "file://remote/x", "https:///nohost", "-oProxyCommand=x:y",
	}
	for _, u := range good {
		if err := checkGitURL(u); err != nil {
			t.Errorf("%q rejected: %v", u, err)
		}
	}
	for _, u := range bad {
		if err := checkGitURL(u); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q accepted: %v", u, err)
		}
	}
	for b, ok := range map[string]bool{"main": true, "feature/x-1": true, "-f": false, "a..b": false, "a b": false, "x.lock": false, "a~1": false} {
		if (checkBranch(b) == nil) != ok {
			t.Errorf("branch %q: ok=%v", b, !ok)
		}
	}
	for u, want := range map[string]string{"https://h/a/b.git": "b", "git@h:a/repo.git/": "repo", "file:///srv/x": "x", "https://h/": "h", "host:..": ""} {
		if got := repoName(u); got != want {
			t.Errorf("repoName(%q) = %q, want %q", u, got, want)
		}
	}
}
