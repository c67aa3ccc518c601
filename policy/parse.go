package policy

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/berth-sh/berth/internal/errdefs"
)

// InstanceTypes are the named sizes a policy may list.
var InstanceTypes = []string{"lite", "basic", "standard-1", "standard-2", "standard-3", "standard-4"}

var (
	digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]{0,127}$`)
)

// Problem is one error in a policy file, at a line.
type Problem struct {
	Line int
	Msg  string
}

// Problems are all the errors found in a policy file.
type Problems []Problem

func (ps Problems) Error() string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "line %d: %s", p.Line, p.Msg)
	}
	return b.String()
}

func (ps Problems) Unwrap() error { return errdefs.ErrInvalidArgument }

// Load reads and validates a policy file.
func Load(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("policy %s:\n%w", path, err)
	}
	return p, nil
}

type parser struct{ probs Problems }

func (ps *parser) errf(n *yaml.Node, format string, args ...any) {
	ps.probs = append(ps.probs, Problem{Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

// Parse validates a policy document and reports every problem with its
// line number.
func Parse(b []byte) (*Policy, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, Problems{{Line: 0, Msg: strings.Join(te.Errors, "; ")}}
		}
		// yaml's syntax errors already read "yaml: line N: ...".
		return nil, Problems{{Line: lineFromYAMLError(err), Msg: err.Error()}}
	}
	p := &Policy{Images: map[string]string{}}
	ps := &parser{}
	if len(root.Content) == 0 {
		return p, nil // an empty file allows everything
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		ps.errf(doc, "the policy must be a mapping with images, default and tenants")
		return nil, ps.probs
	}
	seenKeys := map[string]bool{}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		switch k.Value {
		case "images":
			ps.images(v, p)
		case "default":
			p.Default = ps.tenant(v, "default", false)
		case "tenants":
			if v.Kind != yaml.SequenceNode {
				ps.errf(v, "tenants must be a list")
				continue
			}
			names := map[string]bool{}
			for _, tn := range v.Content {
				t := ps.tenant(tn, "", true)
				if t == nil {
					continue
				}
				if names[t.Name] {
					ps.errf(tn, "tenant %q is defined twice", t.Name)
				}
				names[t.Name] = true
				p.Tenants = append(p.Tenants, t)
			}
		case "pools":
			for _, n := range ps.strings(v, "pools") {
				p.Pools = append(p.Pools, n.Value)
			}
		default:
			ps.errf(k, "unknown key %q (want images, default, tenants or pools)", k.Value)
		}
		if seenKeys[k.Value] {
			ps.errf(k, "%q appears twice", k.Value)
		}
		seenKeys[k.Value] = true
	}
	// An API key may belong to one tenant only.
	seen := map[[32]byte]string{}
	for _, t := range p.Tenants {
		for _, h := range t.keyHashes {
			if o, dup := seen[h]; dup {
				ps.probs = append(ps.probs, Problem{Line: 0, Msg: fmt.Sprintf("an API key of tenant %q is also listed for tenant %q", t.Name, o)})
			}
			seen[h] = t.Name
		}
	}
	if len(ps.probs) > 0 {
		return nil, ps.probs
	}
	return p, nil
}

func lineFromYAMLError(err error) int {
	var n int
	if _, e := fmt.Sscanf(strings.TrimPrefix(err.Error(), "yaml: "), "line %d:", &n); e == nil {
		return n
	}
	return 0
}

func (ps *parser) images(v *yaml.Node, p *Policy) {
	if v.Kind != yaml.MappingNode {
		ps.errf(v, "images must map image names to sha256 digests")
		return
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, d := v.Content[i], v.Content[i+1]
		if !nameRE.MatchString(k.Value) {
			ps.errf(k, "image name %q is not valid (lower case letters, digits, . _ / -)", k.Value)
		}
		if d.Kind != yaml.ScalarNode || !digestRE.MatchString(d.Value) {
			ps.errf(d, "image %q must be pinned to a digest like sha256:<64 hex digits>, got %q", k.Value, d.Value)
			continue
		}
		if _, dup := p.Images[k.Value]; dup {
			ps.errf(k, "image %q is listed twice", k.Value)
		}
		p.Images[k.Value] = d.Value
	}
}

func (ps *parser) tenant(n *yaml.Node, name string, needKeys bool) *Tenant {
	if n.Kind != yaml.MappingNode {
		ps.errf(n, "a tenant must be a mapping")
		return nil
	}
	t := &Tenant{Name: name}
	var nameNode *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "name":
			if !needKeys {
				ps.errf(k, "the default section has no name")
				continue
			}
			nameNode = v
			t.Name = v.Value
			if !nameRE.MatchString(t.Name) {
				ps.errf(v, "tenant name %q is not valid", t.Name)
			}
		case "apiKeys":
			if !needKeys {
				ps.errf(k, "the default section applies to callers without a tenant; it has no apiKeys")
				continue
			}
			for _, kn := range ps.strings(v, "apiKeys") {
				h, ok := hashKey(kn.Value)
				if !ok || len(kn.Value) < 16 {
					ps.errf(kn, "an API key must be at least 16 characters, or sha256:<64 hex digits>")
					continue
				}
				t.keyHashes = append(t.keyHashes, h)
			}
		case "instanceTypes":
			for _, s := range ps.strings(v, "instanceTypes") {
				if !slices.Contains(InstanceTypes, s.Value) {
					ps.errf(s, "unknown instance type %q (want one of %s)", s.Value, strings.Join(InstanceTypes, ", "))
				}
				t.InstanceTypes = append(t.InstanceTypes, s.Value)
			}
		case "custom":
			t.Custom = ps.bounds(v)
		case "maxSandboxes":
			t.MaxSandboxes = int(ps.number(v, "maxSandboxes", 1, 100000))
		case "maxVCPU":
			t.MaxVCPU = ps.number(v, "maxVCPU", 1.0/16, 1024)
		case "maxMemoryMiB":
			t.MaxMemoryMiB = int64(ps.number(v, "maxMemoryMiB", 128, 1<<30))
		case "internet":
			if v.Kind != yaml.ScalarNode || (v.Value != "true" && v.Value != "false") {
				ps.errf(v, "internet must be true or false, got %q", v.Value)
			}
			t.Internet = v.Value == "true"
		case "egressRules":
			for _, s := range ps.strings(v, "egressRules") {
				t.EgressRules = append(t.EgressRules, s.Value)
			}
		case "nodeLabels":
			t.NodeLabels = ps.nodeLabels(v)
		default:
			ps.errf(k, "unknown tenant field %q (want name, apiKeys, instanceTypes, custom, maxSandboxes, maxVCPU, maxMemoryMiB, internet, egressRules, nodeLabels)", k.Value)
		}
	}
	if needKeys {
		if nameNode == nil {
			ps.errf(n, "a tenant needs a name")
		}
		if len(t.keyHashes) == 0 {
			ps.errf(n, "tenant %q needs at least one API key (apiKeys)", t.Name)
		}
	}
	return t
}

// nodeLabels reads a mapping of label keys to lists of allowed values. An
// empty list would allow no node at all, which is a mistake, not a policy.
func (ps *parser) nodeLabels(v *yaml.Node) map[string][]string {
	if v.Kind != yaml.MappingNode {
		ps.errf(v, "nodeLabels must map label keys to lists of allowed values")
		return nil
	}
	out := map[string][]string{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, vals := v.Content[i], v.Content[i+1]
		if k.Value == "" {
			ps.errf(k, "nodeLabels keys must be non-empty")
			continue
		}
		if _, dup := out[k.Value]; dup {
			ps.errf(k, "nodeLabels key %q is listed twice", k.Value)
		}
		var allowed []string
		for _, s := range ps.strings(vals, "nodeLabels."+k.Value) {
			allowed = append(allowed, s.Value)
		}
		if len(allowed) == 0 && vals.Kind == yaml.SequenceNode {
			ps.errf(vals, "nodeLabels.%s allows no value: list at least one", k.Value)
		}
		out[k.Value] = allowed
	}
	return out
}

func (ps *parser) strings(v *yaml.Node, field string) []*yaml.Node {
	if v.Kind != yaml.SequenceNode {
		ps.errf(v, "%s must be a list", field)
		return nil
	}
	var out []*yaml.Node
	for _, s := range v.Content {
		if s.Kind != yaml.ScalarNode || s.Value == "" {
			ps.errf(s, "%s entries must be non-empty strings", field)
			continue
		}
		out = append(out, s)
	}
	return out
}

func (ps *parser) number(v *yaml.Node, field string, lo, hi float64) float64 {
	var f float64
	if v.Kind != yaml.ScalarNode || v.Decode(&f) != nil || math.IsNaN(f) {
		ps.errf(v, "%s must be a number, got %q", field, v.Value)
		return 0
	}
	if f < lo || f > hi {
		ps.errf(v, "%s must be between %v and %v, got %v", field, lo, hi, f)
		return 0
	}
	return f
}

func (ps *parser) bounds(v *yaml.Node) *Bounds {
	if v.Kind != yaml.MappingNode {
		ps.errf(v, "custom must be a mapping with maxVCPU, maxMemoryMiB, maxDiskMB")
		return nil
	}
	b := &Bounds{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, x := v.Content[i], v.Content[i+1]
		switch k.Value {
		case "maxVCPU":
			b.MaxVCPU = ps.number(x, "custom.maxVCPU", 1.0/16, 1024)
		case "maxMemoryMiB":
			b.MaxMemoryMiB = int64(ps.number(x, "custom.maxMemoryMiB", 128, 1<<30))
		case "maxDiskMB":
			b.MaxDiskMB = int64(ps.number(x, "custom.maxDiskMB", 500, 1<<30))
		default:
			ps.errf(k, "unknown custom field %q (want maxVCPU, maxMemoryMiB, maxDiskMB)", k.Value)
		}
	}
	return b
}
