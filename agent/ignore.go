package agent

import (
	"bufio"
	"bytes"
	"path"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

// This file holds the pattern language of archive excludes and .gitignore
// files: a small, self-contained subset of gitignore(5).
//
//   - blank lines and lines starting with # are skipped (\# is a literal #);
//   - trailing spaces are dropped unless escaped with a backslash;
//   - a leading ! negates (\! is a literal !): a later match re-includes;
//   - a trailing / matches directories only;
//   - a pattern with no other / matches the base name at any depth below
//     its .gitignore; one with a / (leading or in the middle) is anchored to
//     the .gitignore's directory;
//   - in a segment, * and ? never match /, [...] is a class; a segment that
//     is exactly ** matches zero or more directories, and a trailing /**
//     matches everything inside (not the directory itself).
//
// Like git, a file inside an ignored directory cannot be re-included: the
// walk never enters the directory.

// maxDoubleStars bounds ** segments per pattern: the matcher backtracks over
// them, so a .gitignore planted in the sandbox could otherwise make the walk
// cost grow like depth^stars.
const maxDoubleStars = 4

// maxPatternLen bounds one pattern line.
const maxPatternLen = 4096

type ignoreRule struct {
	segs     []string
	negate   bool
	dirOnly  bool
	anchored bool
}

// ignoreSet is the rules of one .gitignore (or the exclude list), which
// apply to paths below base ("" for the archive root).
type ignoreSet struct {
	base  string
	rules []ignoreRule
}

// parseIgnoreLine compiles one line; ok is false for blank lines, comments
// and lines that are not a valid pattern.
func parseIgnoreLine(line string) (r ignoreRule, ok bool, err error) {
	line = strings.TrimSuffix(line, "\r")
	if line == "" || line[0] == '#' || len(line) > maxPatternLen {
		return r, false, nil
	}
	for strings.HasSuffix(line, " ") && !strings.HasSuffix(line, `\ `) {
		line = line[:len(line)-1]
	}
	if line[0] == '!' {
		r.negate = true
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") {
		r.dirOnly = true
		line = strings.TrimRight(line, "/")
	}
	if line == "" {
		return r, false, nil
	}
	r.anchored = strings.Contains(line, "/")
	line = strings.TrimLeft(line, "/")
	stars := 0
	for _, s := range strings.Split(line, "/") {
		if s == "" {
			continue // a//b
		}
		if s == "**" {
			if n := len(r.segs); n > 0 && r.segs[n-1] == "**" {
				continue
			}
			stars++
		} else if _, err := path.Match(s, ""); err != nil {
			return r, false, errdefs.InvalidArgument("pattern %q: %w", line, err)
		}
		r.segs = append(r.segs, s)
	}
	if stars > maxDoubleStars {
		return r, false, errdefs.InvalidArgument("pattern %q has more than %d ** segments", line, maxDoubleStars)
	}
	if len(r.segs) == 0 {
		return r, false, nil
	}
	return r, true, nil
}

// parseIgnoreFile compiles a .gitignore. Bad lines are skipped, as git does.
func parseIgnoreFile(base string, data []byte) ignoreSet {
	set := ignoreSet{base: base}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxPatternLen+2)
	for sc.Scan() {
		if r, ok, _ := parseIgnoreLine(sc.Text()); ok {
			set.rules = append(set.rules, r)
		}
	}
	return set
}

// parseExcludes compiles the exclude patterns of a request; unlike a
// .gitignore line, a bad pattern is the caller's mistake and is reported.
func parseExcludes(patterns []string) (ignoreSet, error) {
	set := ignoreSet{}
	for _, p := range patterns {
		if strings.ContainsAny(p, "\n\x00") {
			return set, errdefs.InvalidArgument("exclude pattern %q holds a newline or NUL", p)
		}
		r, ok, err := parseIgnoreLine(p)
		if err != nil {
			return set, err
		}
		if ok {
			set.rules = append(set.rules, r)
		}
	}
	return set, nil
}

// ignored reports whether rel (slash-separated, relative to the archive
// root) is excluded by sets, which are ordered from the root down: the last
// matching rule of the deepest set wins.
func ignored(sets []ignoreSet, rel string, isDir bool) bool {
	result := false
	for i := range sets {
		sub := rel
		if b := sets[i].base; b != "" {
			if !strings.HasPrefix(rel, b+"/") {
				continue
			}
			sub = rel[len(b)+1:]
		}
		var segs []string
		for _, r := range sets[i].rules {
			if r.dirOnly && !isDir {
				continue
			}
			var m bool
			if !r.anchored {
				m, _ = path.Match(r.segs[0], path.Base(sub))
			} else {
				if segs == nil {
					segs = strings.Split(sub, "/")
				}
				m = matchSegs(r.segs, segs)
			}
			if m {
				result = !r.negate
			}
		}
	}
	return result
}

// matchSegs matches pattern segments against path segments.
func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			if len(rest) == 0 {
				return len(name) > 0 // a/** is what is inside a, not a
			}
			for i := 0; i <= len(name); i++ {
				if matchSegs(rest, name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}
