package agent

import (
	"strings"
	"testing"
)

func TestIgnorePatterns(t *testing.T) {
	type probe struct {
		path  string
		dir   bool
		want  bool
		label string
	}
	cases := []struct {
		name   string
		files  map[string]string // .gitignore dir → content
		probes []probe
	}{
		{"basename at any depth", map[string]string{"": "*.log\nnode_modules\n"}, []probe{
			{"a.log", false, true, ""},
			{"x/y/b.log", false, true, ""},
			{"a.log.txt", false, false, ""},
			{"node_modules", true, true, ""},
			{"pkg/node_modules", true, true, ""},
			{"pkg/node_modules_x", true, false, ""},
		}},
		{"comments blanks and escapes", map[string]string{"": "# comment\n\n\\#hash\n\\!bang\ntrail   \nesc\\ \n"}, []probe{
			{"# comment", false, false, "a comment is not a pattern"},
			{"#hash", false, true, ""},
			{"!bang", false, true, ""},
			{"trail", false, true, "trailing spaces dropped"},
			{"esc ", false, true, "escaped trailing space kept"},
			{"esc", false, false, ""},
		}},
		{"negation, last match wins", map[string]string{"": "*.txt\n!keep.txt\n"}, []probe{
			{"a.txt", false, true, ""},
			{"keep.txt", false, false, ""},
			{"d/keep.txt", false, false, ""},
		}},
		{"dir only", map[string]string{"": "build/\n"}, []probe{
			{"build", true, true, ""},
			{"build", false, false, "a file named build stays"},
			{"src/build", true, true, ""},
		}},
		{"anchored", map[string]string{"": "/out\ndocs/*.md\n"}, []probe{
			{"out", true, true, ""},
			{"sub/out", true, false, "leading / anchors"},
			{"docs/a.md", false, true, ""},
			{"x/docs/a.md", false, false, "a middle / anchors"},
			{"docs/sub/a.md", false, false, "* does not cross /"},
		}},
		{"double star", map[string]string{"": "**/cache\nlogs/**\na/**/z\n"}, []probe{
			{"cache", true, true, "leading **/ matches at the root"},
			{"p/q/cache", true, true, ""},
			{"logs", true, false, "a/** is not a itself"},
			{"logs/x", false, true, ""},
			{"logs/x/y", false, true, ""},
			{"a/z", false, true, "/**/ matches zero dirs"},
			{"a/b/c/z", false, true, ""},
			{"b/a/z", false, false, ""},
		}},
		{"question mark and class", map[string]string{"": "f?o\n[ab].c\n"}, []probe{
			{"foo", false, true, ""},
			{"fo", false, false, ""},
			{"f/o", false, false, "? does not match /"},
			{"a.c", false, true, ""},
			{"c.c", false, false, ""},
		}},
		{"nested gitignore overrides", map[string]string{"": "*.tmp\n", "sub": "!x.tmp\n/local\n"}, []probe{
			{"x.tmp", false, true, "the nested file does not apply above it"},
			{"sub/x.tmp", false, false, ""},
			{"sub/y.tmp", false, true, ""},
			{"sub/local", false, true, "anchored to sub"},
			{"local", false, false, ""},
			{"sub/d/local", false, false, ""},
		}},
		{"unicode and spaces", map[string]string{"": "résumé*\nmy dir/\n日本語/*.bak\n"}, []probe{
			{"résumé.txt", false, true, ""},
			{"x/my dir", true, true, ""},
			{"日本語/a.bak", false, true, ""},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sets []ignoreSet
			for _, base := range []string{"", "sub"} {
				if content, ok := c.files[base]; ok {
					sets = append(sets, parseIgnoreFile(base, []byte(content)))
				}
			}
			for _, p := range c.probes {
				if got := ignored(sets, p.path, p.dir); got != p.want {
					t.Errorf("%q (dir=%v): ignored=%v, want %v %s", p.path, p.dir, got, p.want, p.label)
				}
			}
		})
	}
}

func TestExcludeErrorsAndBounds(t *testing.T) {
	if _, err := parseExcludes([]string{"a[b"}); err == nil {
		t.Error("a malformed class must be refused")
	}
	if _, err := parseExcludes([]string{"a\nb"}); err == nil {
		t.Error("a newline in a pattern must be refused")
	}
	if _, err := parseExcludes([]string{"**/a/**/b/**/c/**/d/**/e"}); err == nil {
		t.Error("too many ** must be refused")
	}
	set, err := parseExcludes([]string{"**/**/**/x", ""})
	if err != nil || len(set.rules) != 1 || strings.Join(set.rules[0].segs, "/") != "**/x" {
		t.Fatalf("consecutive ** collapse: %+v %v", set, err)
	}
	// Backtracking over several ** on a deep path terminates with no match.
	set, err = parseExcludes([]string{"**/a*/**/b*/**/c*/**/nomatch"})
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat("ab/", 60) + "leaf"
	if ignored([]ignoreSet{set}, deep, false) {
		t.Fatal("unexpected match")
	}
}
