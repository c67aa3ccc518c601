package main

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

// GVK names a Kubernetes kind: "" is the core group.
type GVK struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// APIVersion is the apiVersion a manifest of this kind carries.
func (g GVK) APIVersion() string {
	if g.Group == "" {
		return g.Version
	}
	return g.Group + "/" + g.Version
}

// FileName is the name kubeconform looks the kind's schema up by (its
// {{ .ResourceKind }}{{ .KindSuffix }}.json): the first DNS label of the
// group only, so rbac.authorization.k8s.io/v1 Role is role-rbac-v1.json.
func (g GVK) FileName() string {
	suffix := "-" + strings.ToLower(g.Version)
	if g.Group != "" {
		label, _, _ := strings.Cut(g.Group, ".")
		suffix = "-" + strings.ToLower(label) + suffix
	}
	return strings.ToLower(g.Kind) + suffix + ".json"
}

const (
	refPrefix  = "#/definitions/"
	draft07    = "http://json-schema.org/draft-07/schema#"
	quantityID = "io.k8s.apimachinery.pkg.api.resource.Quantity"
	gvkKey     = "x-kubernetes-group-version-kind"
	preserve   = "x-kubernetes-preserve-unknown-fields"
)

// kept are the OpenAPI v2 schema keywords carried into the JSON schema as
// they are (after their sub-schemas are converted); dropped are read and
// left out on purpose. Anything else is an error: see the package doc.
var (
	kept    = map[string]bool{"type": true, "$ref": true, "properties": true, "items": true, "required": true, "additionalProperties": true, "enum": true}
	dropped = map[string]bool{"description": true, "format": true, "default": true, "example": true, "title": true}
)

// converter holds one spec's definitions and turns them into schemas.
type converter struct {
	defs   map[string]map[string]any
	strict bool
}

// Convert returns one standalone schema file per kind the spec declares,
// keyed by FileName. The output is deterministic (sorted keys).
func Convert(doc []byte, strict bool) (map[string][]byte, error) {
	var spec struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(doc, &spec); err != nil {
		return nil, errdefs.InvalidArgument("read the OpenAPI document: %w", err)
	}
	if len(spec.Definitions) == 0 {
		return nil, errdefs.InvalidArgument("the OpenAPI document has no definitions (not an OpenAPI v2 swagger.json?)")
	}
	c := &converter{defs: spec.Definitions, strict: strict}
	files := map[string][]byte{}
	owner := map[string]string{} // file name -> definition, to catch two kinds sharing a file
	for _, name := range sortedKeys(spec.Definitions) {
		gvks, err := kindsOf(name, spec.Definitions[name])
		if err != nil {
			return nil, err
		}
		for _, g := range gvks {
			fn := g.FileName()
			if prev, ok := owner[fn]; ok {
				return nil, errdefs.InvalidArgument("%s and %s (%s) both map to %s: kubeconform could not tell them apart", prev, name, g.APIVersion(), fn)
			}
			owner[fn] = name
			b, err := c.file(name, g)
			if err != nil {
				return nil, err
			}
			files[fn] = b
		}
	}
	if len(files) == 0 {
		return nil, errdefs.InvalidArgument("the OpenAPI document declares no kinds (no %s)", gvkKey)
	}
	return files, nil
}

// kindsOf reads a definition's group-version-kinds: a definition such as
// DeleteOptions is the same type in many groups.
func kindsOf(name string, def map[string]any) ([]GVK, error) {
	raw, ok := def[gvkKey]
	if !ok {
		return nil, nil
	}
	b, _ := json.Marshal(raw)
	var gvks []GVK
	if err := json.Unmarshal(b, &gvks); err != nil {
		return nil, errdefs.InvalidArgument("%s: %s is not a list of {group, version, kind}: %w", name, gvkKey, err)
	}
	for _, g := range gvks {
		if g.Version == "" || g.Kind == "" {
			return nil, errdefs.InvalidArgument("%s: %s entry %+v lacks a version or kind", name, gvkKey, g)
		}
	}
	return gvks, nil
}

// file builds the standalone schema of one kind: the definition itself at
// the root, with apiVersion and kind pinned to this GVK, and every
// definition it reaches under "definitions".
func (c *converter) file(name string, g GVK) ([]byte, error) {
	reached := map[string]bool{}
	root, err := c.schema(name, c.defs[name], reached)
	if err != nil {
		return nil, err
	}
	props, _ := root["properties"].(map[string]any)
	if props == nil {
		return nil, errdefs.InvalidArgument("%s is a kind without properties", name)
	}
	props["apiVersion"] = map[string]any{"type": "string", "enum": []any{g.APIVersion()}}
	props["kind"] = map[string]any{"type": "string", "enum": []any{g.Kind}}
	defs := map[string]any{}
	// Converting a reached definition can reach more: loop to a fixpoint.
	for done := false; !done; {
		done = true
		for _, d := range sortedKeys(reached) {
			if _, ok := defs[d]; ok {
				continue
			}
			s, err := c.schema(d, c.defs[d], reached)
			if err != nil {
				return nil, err
			}
			defs[d] = s
			done = false
		}
	}
	root["$schema"] = draft07
	if len(defs) > 0 {
		root["definitions"] = defs
	}
	return json.Marshal(root)
}

// schema converts one OpenAPI schema node; at is where it sits, for
// messages. Every $ref it meets is recorded in reached.
func (c *converter) schema(at string, in map[string]any, reached map[string]bool) (map[string]any, error) {
	if at == quantityID {
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}, nil
	}
	if in["format"] == "int-or-string" || in["x-kubernetes-int-or-string"] == true {
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}, nil
	}
	out := map[string]any{}
	for _, k := range sortedKeys(in) {
		v := in[k]
		switch {
		case strings.HasPrefix(k, "x-kubernetes-"), dropped[k]:
			continue
		case !kept[k]:
			return nil, errdefs.InvalidArgument("%s: OpenAPI keyword %q is not one kubeschema knows; teach it before trusting the schemas", at, k)
		}
		switch k {
		case "$ref":
			ref, _ := v.(string)
			target, ok := strings.CutPrefix(ref, refPrefix)
			if !ok || c.defs[target] == nil {
				return nil, errdefs.InvalidArgument("%s: $ref %q names no definition of this document", at, ref)
			}
			reached[target] = true
			out[k] = ref
		case "properties":
			m, ok := v.(map[string]any)
			if !ok {
				return nil, errdefs.InvalidArgument("%s: properties is not an object", at)
			}
			props := map[string]any{}
			for _, p := range sortedKeys(m) {
				sub, ok := m[p].(map[string]any)
				if !ok {
					return nil, errdefs.InvalidArgument("%s.%s: not a schema object", at, p)
				}
				s, err := c.schema(at+"."+p, sub, reached)
				if err != nil {
					return nil, err
				}
				props[p] = s
			}
			out[k] = props
		case "items", "additionalProperties":
			if b, ok := v.(bool); ok {
				out[k] = b
				continue
			}
			sub, ok := v.(map[string]any)
			if !ok {
				return nil, errdefs.InvalidArgument("%s: %s is neither a schema nor a boolean", at, k)
			}
			s, err := c.schema(at+"."+k, sub, reached)
			if err != nil {
				return nil, err
			}
			out[k] = s
		default:
			out[k] = v
		}
	}
	// Strict: an object that names its fields has no others, unless the
	// API itself keeps unknown fields (x-kubernetes-preserve-unknown-fields).
	if _, has := out["properties"]; c.strict && has && out["additionalProperties"] == nil && in[preserve] != true {
		out["additionalProperties"] = false
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
