package layers

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Table is a parsed layer table: layers from the top down, each a list of
// package prefixes, and the wrong-way edges allowed for now.
type Table struct {
	Layers     []Layer
	Exceptions []Edge
}

// Layer is one row of the table.
type Layer struct {
	Name     string
	Prefixes []string
}

// Edge is an import from one package (or prefix) to another.
type Edge struct{ From, To string }

func (e Edge) String() string { return e.From + " -> " + e.To }

// Parse reads a table in the docs/layers.txt format.
func Parse(r io.Reader) (*Table, error) {
	t := &Table{}
	sc := bufio.NewScanner(r)
	seen := map[string]string{}
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "except "):
			from, to, ok := strings.Cut(strings.TrimPrefix(line, "except "), "->")
			from, to = strings.TrimSpace(from), strings.TrimSpace(to)
			if !ok || from == "" || to == "" || strings.ContainsAny(from+to, " \t") {
				return nil, errdefs.InvalidArgument("layers line %d: want \"except FROM -> TO\", got %q", n, line)
			}
			t.Exceptions = append(t.Exceptions, Edge{from, to})
		default:
			name, rest, ok := strings.Cut(line, ":")
			prefixes := strings.Fields(rest)
			if !ok || strings.TrimSpace(name) == "" || len(prefixes) == 0 {
				return nil, errdefs.InvalidArgument("layers line %d: want \"LAYER: PREFIX ...\", got %q", n, line)
			}
			for _, p := range prefixes {
				if prev, dup := seen[p]; dup {
					return nil, errdefs.InvalidArgument("layers line %d: prefix %q is already in layer %s", n, p, prev)
				}
				seen[p] = name
			}
			t.Layers = append(t.Layers, Layer{Name: strings.TrimSpace(name), Prefixes: prefixes})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.Layers) == 0 {
		return nil, errdefs.InvalidArgument("layers: the table has no layers")
	}
	return t, nil
}

// under reports whether pkg is prefix or lies below it.
func under(pkg, prefix string) bool {
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

// Place returns the index (0 is the top) and name of pkg's layer: the
// layer of the longest prefix that matches it. ok is false for a package
// no prefix matches.
func (t *Table) Place(pkg string) (index int, name string, ok bool) {
	best := -1
	for i, l := range t.Layers {
		for _, p := range l.Prefixes {
			if under(pkg, p) && len(p) > best {
				best, index, name, ok = len(p), i, l.Name, true
			}
		}
	}
	return index, name, ok
}

func (t *Table) excepted(from, to string) (int, bool) {
	for i, e := range t.Exceptions {
		if under(from, e.From) && under(to, e.To) {
			return i, true
		}
	}
	return 0, false
}

// Check judges an import graph (package -> the module's packages it
// imports, all paths relative to the module) and returns one line per
// problem, sorted: packages the table does not place, imports that point
// to a higher layer, and exceptions that no longer match any edge.
func (t *Table) Check(graph map[string][]string) []string {
	var problems []string
	used := make([]bool, len(t.Exceptions))
	for pkg, imports := range graph {
		from, fromName, ok := t.Place(pkg)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: no layer in the table places it (add a prefix to docs/layers.txt)", pkg))
			continue
		}
		for _, imp := range imports {
			to, toName, ok := t.Place(imp)
			if !ok || to >= from {
				continue // an unplaced import is reported as a package of its own
			}
			if i, ok := t.excepted(pkg, imp); ok {
				used[i] = true
				continue
			}
			problems = append(problems, fmt.Sprintf("%s (%s) imports %s (%s): a higher layer", pkg, fromName, imp, toName))
		}
	}
	for i, e := range t.Exceptions {
		if !used[i] {
			problems = append(problems, fmt.Sprintf("except %s: matches no wrong-way edge any more; remove it from docs/layers.txt", e))
		}
	}
	sort.Strings(problems)
	return problems
}
