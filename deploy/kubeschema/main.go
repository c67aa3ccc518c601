package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/berth-sh/berth/internal/errdefs"
)

func main() {
	spec := flag.String("spec", "", "OpenAPI v2 document (swagger.json)")
	version := flag.String("version", "", "Kubernetes version the spec belongs to, as vMAJOR.MINOR.PATCH (names the output folders)")
	out := flag.String("out", "", "folder to write <version>-standalone and <version>-standalone-strict into")
	flag.Parse()
	n, err := run(*spec, *version, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeschema:", err)
		os.Exit(1)
	}
	fmt.Printf("kubeschema: %d kinds from %s into %s\n", n, *spec, *out)
}

var versionRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)

// run writes both variants and returns how many kinds each holds. Each
// folder is written beside its final place and renamed into it, so a run
// killed halfway leaves no half-filled folder for kubeconform to trust.
func run(spec, version, out string) (int, error) {
	if spec == "" || out == "" || !versionRE.MatchString(version) {
		return 0, errdefs.InvalidArgument("want -spec FILE -version vX.Y.Z -out DIR (got -spec %q -version %q -out %q)", spec, version, out)
	}
	doc, err := os.ReadFile(spec)
	if err != nil {
		return 0, errdefs.InvalidArgument("read %s: %w", spec, err)
	}
	n := 0
	for _, strict := range []bool{false, true} {
		files, err := Convert(doc, strict)
		if err != nil {
			return 0, err
		}
		n = len(files)
		name := version + "-standalone"
		if strict {
			name += "-strict"
		}
		if err := writeDir(filepath.Join(out, name), files); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func writeDir(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return errdefs.Internal("make %s: %w", filepath.Dir(dir), err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".kubeschema-*")
	if err != nil {
		return errdefs.Internal("make a temporary folder beside %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return errdefs.Internal("write %s: %w", name, err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return errdefs.Internal("chmod %s: %w", tmp, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return errdefs.Internal("replace %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return errdefs.Internal("move %s into place: %w", dir, err)
	}
	return nil
}
