package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/server"
)

// cpEnd is one side of a copy: a local path ("-" is stdin or stdout) or
// a path in a sandbox.
type cpEnd struct {
	sandbox string // "" for local
	path    string
}

func (e cpEnd) remote() bool { return e.sandbox != "" }

// parseCpArg decides whether s names a sandbox path. NAME:PATH is remote
// when NAME is a valid sandbox name; paths starting with '/', '.' or '~'
// are always local, so ./a:b is the local file "a:b".
func parseCpArg(s string) (cpEnd, error) {
	if s == "" {
		return cpEnd{}, errors.New("empty path")
	}
	if s == "-" || strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "~") {
		return cpEnd{path: s}, nil
	}
	name, p, ok := strings.Cut(s, ":")
	if !ok || server.ValidateSandboxName(name) != nil {
		return cpEnd{path: s}, nil
	}
	if p == "" {
		return cpEnd{}, fmt.Errorf("%q names no path inside sandbox %s: write %s:/path/to/file", s, name, name)
	}
	return cpEnd{sandbox: name, path: p}, nil
}

// parseCpArgs parses SRC and DST; exactly one must be in a sandbox.
func parseCpArgs(src, dst string) (from, to cpEnd, err error) {
	if from, err = parseCpArg(src); err != nil {
		return from, to, fmt.Errorf("SRC: %w", err)
	}
	if to, err = parseCpArg(dst); err != nil {
		return from, to, fmt.Errorf("DST: %w", err)
	}
	switch {
	case from.remote() && to.remote():
		return from, to, errors.New("both SRC and DST are in sandboxes; copy through a local file")
	case !from.remote() && !to.remote():
		return from, to, errors.New("one of SRC and DST must be a sandbox path NAME:/path")
	}
	return from, to, nil
}

func (a *app) cpCmd() *cobra.Command {
	var fo client.FileOptions
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a sandbox",
		Long: `Copy one file between this machine and a sandbox. Exactly one of SRC and DST
is a sandbox path, written NAME:/path. Use - as the local side for stdin
(upload) or stdout (download). Data is streamed: there is no size limit.

If DST is a directory (or ends in /), the file keeps its name. Uploads keep
the local file's permission bits; downloads keep the sandbox file's.
Local paths containing ':' must start with ./ or /.

A relative sandbox path starts in the home of --user (default: the
sandbox's user; root's home is /root), or in the working directory of
--session. An upload over an existing file rewrites it in place (same
inode and owner); the new file belongs to --user.

Directories are not copied; pack them first:
  tar czf - src | berth cp - demo:/tmp/src.tgz && berth exec demo -- tar xzf /tmp/src.tgz

Examples:
  berth cp ./app.py demo:/home/user/app.py
  berth cp demo:/var/log/build.log .
  berth cp demo:/etc/os-release -
  curl -sL https://example.com/data.csv | berth cp - demo:/data/data.csv`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			from, to, err := parseCpArgs(args[0], args[1])
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := client.WithFileOptions(cmd.Context(), fo)
			if from.remote() {
				return a.download(ctx, c, from, to.path)
			}
			return a.upload(ctx, c, from.path, to)
		},
	}
	cmd.Flags().StringVar(&fo.User, "user", "", "act as this sandbox user (relative paths from its home; owner of a new file)")
	cmd.Flags().StringVar(&fo.Session, "session", "", "resolve a relative sandbox path from this session's working directory")
	return cmd
}

func (a *app) upload(ctx context.Context, c *client.Client, src string, dst cpEnd) error {
	var (
		r    io.Reader = a.stdin
		mode uint32    // stdin: 0644 for a new file, an existing one keeps its mode
		size int64     = -1
	)
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory: berth cp copies single files (see berth cp --help for directories)", src)
		}
		r, mode, size = f, uint32(fi.Mode().Perm()), fi.Size()
	}
	target := dst.path
	if strings.HasSuffix(target, "/") {
		target += filepath.Base(src)
	} else if fi, err := c.Stat(ctx, dst.sandbox, target); err == nil && fi.Type == "dir" {
		target = path.Join(target, filepath.Base(src))
	}
	if src == "-" && (strings.HasSuffix(dst.path, "/") || target != dst.path) {
		return fmt.Errorf("%s:%s is a directory; name the file to write from stdin", dst.sandbox, dst.path)
	}
	p := a.newProgress(size)
	err := c.WriteFile(ctx, dst.sandbox, target, p.reader(r), mode)
	p.done()
	return err
}

func (a *app) download(ctx context.Context, c *client.Client, src cpEnd, dst string) error {
	fi, err := c.Stat(ctx, src.sandbox, src.path)
	if err != nil {
		return err
	}
	if fi.Type == "dir" {
		return errdefs.InvalidArgument("%s:%s is a directory: berth cp copies single files (see berth cp --help for directories)", src.sandbox, src.path)
	}
	rc, err := c.ReadFile(ctx, src.sandbox, src.path)
	if err != nil {
		return err
	}
	defer rc.Close()
	p := a.newProgress(fi.Size)
	defer p.done()
	if dst == "-" {
		_, err := io.Copy(a.stdout, p.reader(rc))
		return err
	}
	if st, err := os.Stat(dst); (err == nil && st.IsDir()) || strings.HasSuffix(dst, "/") {
		dst = filepath.Join(dst, path.Base(src.path))
	}
	// Write to a temporary file and rename, so an interrupted download
	// never leaves a truncated file under the final name.
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".berth-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, p.reader(rc)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(os.FileMode(fi.Mode & 0o777)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// progress prints bytes and bytes/second to stderr during large transfers,
// only when stderr is a terminal (never into a log or a pipe).
type progress struct {
	n       atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	enabled bool
}

const progressMin = 8 << 20 // smaller transfers finish before a line is useful

func (a *app) newProgress(size int64) *progress {
	p := &progress{stop: make(chan struct{})}
	if !isTerminal(a.stderr) || (size >= 0 && size < progressMin) {
		return p
	}
	p.enabled = true
	start := time.Now()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		printed := false
		line := func() {
			el := time.Since(start).Seconds()
			n := p.n.Load()
			total := ""
			if size > 0 {
				total = " of " + humanBytes(size)
			}
			fmt.Fprintf(a.stderr, "\r%s%s  %s/s   ", humanBytes(n), total, humanBytes(int64(float64(n)/max(el, 0.001))))
			printed = true
		}
		for {
			select {
			case <-p.stop:
				if printed {
					line()
					fmt.Fprintln(a.stderr)
				}
				return
			case <-t.C:
				if p.n.Load() >= progressMin {
					line()
				}
			}
		}
	}()
	return p
}

func (p *progress) reader(r io.Reader) io.Reader {
	if !p.enabled {
		return r
	}
	return &countReader{r: r, n: &p.n}
}

func (p *progress) done() {
	p.once.Do(func() {
		close(p.stop)
		p.wg.Wait()
	})
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}
