package layers

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func readTable(t *testing.T) *Table {
	t.Helper()
	f, err := os.Open("../../docs/layers.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// moduleGraph lists the module's packages (with every build tag, so the
// suites under test/ and the berthtest files count) and their imports of
// one another, relative to the module path.
func moduleGraph(t *testing.T) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the packages with")
	}
	root, _ := filepath.Abs("../..")
	run := func(args ...string) string {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	mod := strings.TrimSpace(run("list", "-m")) + "/"
	out := run("list", "-tags", "berthtest,integration,adversarial,compat,browser",
		"-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], mod)
		graph[pkg] = nil
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, mod) {
				graph[pkg] = append(graph[pkg], strings.TrimPrefix(imp, mod))
			}
		}
	}
	if len(graph) < 20 || graph["api"] == nil && graph["daemon"] == nil {
		t.Fatalf("go list found too little of the module: %d packages", len(graph))
	}
	return graph
}

// TestImportsFlowOneWay is issue 13's import-direction test over the tree
// as it is.
func TestImportsFlowOneWay(t *testing.T) {
	tab := readTable(t)
	for _, p := range tab.Check(moduleGraph(t)) {
		t.Error(p)
	}
}

// The negative controls: the same checker on small synthetic graphs.
func TestCheckFindsWrongWayImports(t *testing.T) {
	tab, err := Parse(strings.NewReader(`
top:    cmd
middle: daemon server
bottom: api internal
leafy:  internal/leaf   # a longer prefix places its package lower
except server -> cmd    # a known debt
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		graph map[string][]string
		want  []string // substrings, one per expected problem
	}{
		{"downward and sideways imports pass", map[string][]string{
			"cmd/berth": {"daemon", "api"}, "daemon": {"server", "api/x"}, "server": {"cmd"}, "api": {"internal/leaf"}, "internal/leaf": nil,
		}, nil},
		{"an upward import fails", map[string][]string{
			"cmd/berth": nil, "api": {"daemon"}, "server": {"cmd"},
		}, []string{"api (bottom) imports daemon (middle)"}},
		{"longest prefix wins", map[string][]string{
			"internal/leaf/x": {"internal/errdefs"}, "server": {"cmd"},
		}, []string{"internal/leaf/x (leafy) imports internal/errdefs (bottom)"}},
		{"an unplaced package fails", map[string][]string{
			"newroom": {"api"}, "server": {"cmd"},
		}, []string{"newroom: no layer"}},
		{"a stale exception fails", map[string][]string{
			"server": {"api"},
		}, []string{"except server -> cmd: matches no wrong-way edge"}},
	} {
		got := tab.Check(c.graph)
		if len(got) != len(c.want) {
			t.Errorf("%s: problems %q, want %d", c.name, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: problem %q, want one naming %q", c.name, got[i], w)
			}
		}
	}
}

// The real table, with one forbidden edge added to the real graph, fails
// with exactly that edge.
func TestRealTableRefusesAForbiddenImport(t *testing.T) {
	tab := readTable(t)
	graph := moduleGraph(t)
	before := map[string]bool{}
	for _, p := range tab.Check(graph) {
		before[p] = true
	}
	graph["api"] = append(graph["api"], "daemon")
	var added []string
	for _, p := range tab.Check(graph) {
		if !before[p] {
			added = append(added, p)
		}
	}
	if len(added) != 1 || !strings.Contains(added[0], "api (leaves) imports daemon (daemon)") {
		t.Fatalf("new problems = %q, want only api -> daemon", added)
	}
}

// The node does not import the control plane or the faces above it: each
// of node/local's old wrong-way edges (issue 13), added back to the real
// graph, fails the real table, which holds no exception for any.
func TestRealTableRefusesNodeImportingUp(t *testing.T) {
	tab := readTable(t)
	if len(tab.Exceptions) != 0 {
		t.Fatalf("docs/layers.txt allows wrong-way edges again: %v", tab.Exceptions)
	}
	graph := moduleGraph(t)
	if len(tab.Check(graph)) != 0 {
		t.Fatalf("the tree already fails: %q", tab.Check(graph))
	}
	for to, layer := range map[string]string{"controller": "control", "durable": "control", "policy": "control", "preview": "faces", "control": "control"} {
		g := map[string][]string{}
		for k, v := range graph {
			g[k] = v
		}
		g["node/local"] = append(append([]string(nil), graph["node/local"]...), to)
		got := tab.Check(g)
		want := "node/local (node) imports " + to + " (" + layer + ")"
		if len(got) != 1 || !strings.Contains(got[0], want) {
			t.Errorf("node/local -> %s: problems %q, want only %q", to, got, want)
		}
	}
}

func TestParseRejectsBadLines(t *testing.T) {
	for _, s := range []string{"", "just words", "a: x\nb: x", "a: x\nexcept x", "a: x\nexcept x -> "} {
		if _, err := Parse(strings.NewReader(s)); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}
