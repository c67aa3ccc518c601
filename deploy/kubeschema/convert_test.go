package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

// spec is a small OpenAPI v2 document with the shapes the real one has: a
// core kind, a kind in a dotted group, a type shared by two groups, a
// recursive type, a map, an int-or-string, a Quantity and a type that keeps
// unknown fields.
const spec = `{"definitions": {
  "io.k8s.api.core.v1.ConfigMap": {
    "description": "dropped",
    "type": "object",
    "properties": {
      "apiVersion": {"type": "string"},
      "kind": {"type": "string"},
      "data": {"type": "object", "additionalProperties": {"type": "string"}},
      "port": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
      "size": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity"},
      "count": {"type": "integer", "format": "int32"}
    },
    "required": ["data"],
    "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}]
  },
  "io.k8s.api.rbac.v1.Role": {
    "type": "object",
    "properties": {
      "apiVersion": {"type": "string"},
      "kind": {"type": "string"},
      "rules": {"type": "array", "items": {"$ref": "#/definitions/io.k8s.api.rbac.v1.Rule"}},
      "raw": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.runtime.RawExtension"}
    },
    "x-kubernetes-group-version-kind": [{"group": "rbac.authorization.k8s.io", "kind": "Role", "version": "v1"}]
  },
  "io.k8s.api.rbac.v1.Rule": {
    "type": "object",
    "properties": {"verbs": {"type": "array", "items": {"type": "string"}}, "sub": {"$ref": "#/definitions/io.k8s.api.rbac.v1.Rule"}}
  },
  "io.k8s.apimachinery.pkg.runtime.RawExtension": {
    "type": "object",
    "properties": {"x": {"type": "string"}},
    "x-kubernetes-preserve-unknown-fields": true
  },
  "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions": {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "dryRun": {"type": "array", "items": {"type": "string"}}},
    "x-kubernetes-group-version-kind": [
      {"group": "", "kind": "DeleteOptions", "version": "v1"},
      {"group": "apps", "kind": "DeleteOptions", "version": "v1"}
    ]
  },
  "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
  "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
  "io.k8s.api.core.v1.Unused": {"type": "object", "properties": {"a": {"type": "string"}}}
}}`

func convert(t *testing.T, doc string, strict bool) map[string]map[string]any {
	t.Helper()
	files, err := Convert([]byte(doc), strict)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for name, b := range files {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = m
	}
	return out
}

// at walks a decoded schema by keys.
func at(t *testing.T, m any, path ...string) any {
	t.Helper()
	for _, k := range path {
		mm, ok := m.(map[string]any)
		if !ok {
			t.Fatalf("at %v: %q is under a %T", path, k, m)
		}
		m = mm[k]
	}
	return m
}

func TestFileNamesFollowKubeconform(t *testing.T) {
	// kubeconform's lookup: lower-case kind, the group's first DNS label,
	// the version; the core group has no label. A type declared in two
	// groups gets a file for each.
	want := []string{"configmap-v1.json", "deleteoptions-apps-v1.json", "deleteoptions-v1.json", "role-rbac-v1.json"}
	if got := sortedKeys(convert(t, spec, true)); !reflect.DeepEqual(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
}

func TestStrictClosesObjects(t *testing.T) {
	strict := convert(t, spec, true)["configmap-v1.json"]
	if got := at(t, strict, "additionalProperties"); got != false {
		t.Fatalf("strict root additionalProperties = %v, want false", got)
	}
	// A map keeps its value schema: its keys are the user's.
	if got := at(t, strict, "properties", "data", "additionalProperties", "type"); got != "string" {
		t.Fatalf("map values: %v", got)
	}
	role := convert(t, spec, true)["role-rbac-v1.json"]
	if got := at(t, role, "definitions", "io.k8s.api.rbac.v1.Rule", "additionalProperties"); got != false {
		t.Fatalf("strict nested definition additionalProperties = %v, want false", got)
	}
	// The API keeps unknown fields here, so strict must not close it.
	if got := at(t, role, "definitions", "io.k8s.apimachinery.pkg.runtime.RawExtension", "additionalProperties"); got != nil {
		t.Fatalf("preserve-unknown-fields type closed: %v", got)
	}
	// Negative control: the non-strict variant leaves objects open.
	loose := convert(t, spec, false)["configmap-v1.json"]
	if got := at(t, loose, "additionalProperties"); got != nil {
		t.Fatalf("non-strict root additionalProperties = %v, want absent", got)
	}
}

func TestKindAndAPIVersionPinned(t *testing.T) {
	files := convert(t, spec, true)
	for name, want := range map[string][2]string{
		"configmap-v1.json":          {"v1", "ConfigMap"},
		"role-rbac-v1.json":          {"rbac.authorization.k8s.io/v1", "Role"},
		"deleteoptions-apps-v1.json": {"apps/v1", "DeleteOptions"},
	} {
		if got := at(t, files[name], "properties", "apiVersion", "enum"); !reflect.DeepEqual(got, []any{want[0]}) {
			t.Errorf("%s apiVersion enum %v, want [%s]", name, got, want[0])
		}
		if got := at(t, files[name], "properties", "kind", "enum"); !reflect.DeepEqual(got, []any{want[1]}) {
			t.Errorf("%s kind enum %v, want [%s]", name, got, want[1])
		}
	}
}

func TestSpecialStringTypes(t *testing.T) {
	defs := at(t, convert(t, spec, true)["configmap-v1.json"], "definitions").(map[string]any)
	ios := at(t, defs, "io.k8s.apimachinery.pkg.util.intstr.IntOrString", "oneOf")
	if !reflect.DeepEqual(ios, []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}) {
		t.Fatalf("IntOrString: %v", ios)
	}
	q := at(t, defs, "io.k8s.apimachinery.pkg.api.resource.Quantity", "oneOf")
	if !reflect.DeepEqual(q, []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}) {
		t.Fatalf("Quantity: %v", q)
	}
	// Formats and descriptions are dropped; the type stays.
	count := at(t, convert(t, spec, true)["configmap-v1.json"], "properties", "count").(map[string]any)
	if !reflect.DeepEqual(count, map[string]any{"type": "integer"}) {
		t.Fatalf("count: %v", count)
	}
	if d := at(t, convert(t, spec, true)["configmap-v1.json"], "description"); d != nil {
		t.Fatalf("description kept: %v", d)
	}
}

func TestOnlyReachedDefinitionsTravel(t *testing.T) {
	role := convert(t, spec, true)["role-rbac-v1.json"]
	defs := at(t, role, "definitions").(map[string]any)
	want := []string{"io.k8s.api.rbac.v1.Rule", "io.k8s.apimachinery.pkg.runtime.RawExtension"}
	if got := sortedKeys(defs); !reflect.DeepEqual(got, want) {
		t.Fatalf("definitions %v, want %v (the recursive Rule once, nothing unreached)", got, want)
	}
	if ref := at(t, defs, "io.k8s.api.rbac.v1.Rule", "properties", "sub", "$ref"); ref != "#/definitions/io.k8s.api.rbac.v1.Rule" {
		t.Fatalf("recursive ref: %v", ref)
	}
}

func TestRefusesWhatItCannotConvert(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown keyword": `{"definitions": {"a.v1.K": {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}},
			"x-kubernetes-group-version-kind": [{"group": "", "kind": "K", "version": "v1"}]}}}`,
		"dangling ref": `{"definitions": {"a.v1.K": {"type": "object", "properties": {"n": {"$ref": "#/definitions/nope"}},
			"x-kubernetes-group-version-kind": [{"group": "", "kind": "K", "version": "v1"}]}}}`,
		"two kinds one file": `{"definitions": {
			"a.v1.K": {"type": "object", "properties": {}, "x-kubernetes-group-version-kind": [{"group": "x.io", "kind": "K", "version": "v1"}]},
			"b.v1.K": {"type": "object", "properties": {}, "x-kubernetes-group-version-kind": [{"group": "x.example.com", "kind": "K", "version": "v1"}]}}}`,
		"no kinds":       `{"definitions": {"a.v1.T": {"type": "string"}}}`,
		"no definitions": `{"swagger": "2.0"}`,
		"not json":       `{`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Convert([]byte(doc), true)
			if !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("want an invalid-argument error, got %v", err)
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	a, err := Convert([]byte(spec), true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Convert([]byte(spec), true)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs over one spec differ")
	}
}

func TestRunWritesBothVariants(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "swagger.json")
	if err := os.WriteFile(in, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "schemas")
	n, err := run(in, "v1.37.2", out)
	if err != nil || n != 4 {
		t.Fatalf("run = %d, %v", n, err)
	}
	for _, v := range []string{"v1.37.2-standalone", "v1.37.2-standalone-strict"} {
		if _, err := os.Stat(filepath.Join(out, v, "role-rbac-v1.json")); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".kubeschema-") {
			t.Fatalf("temporary folder %s left behind", e.Name())
		}
	}
	if _, err := run(in, "1.37", out); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a version without v and patch: %v", err)
	}
}
