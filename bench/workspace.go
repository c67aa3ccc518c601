package bench

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"path"
	"sort"
	"strings"
	"time"
)

// WorkspaceSpec sizes the task benchmark's generated project: a Node app
// whose node_modules holds NodePackages packages of FilesPerPackage files
// each, and PyPackages Python packages of PyModules modules each for the
// app's venv. Zero fields take the defaults (DefaultWorkspace).
type WorkspaceSpec struct {
	NodePackages    int    `json:"node_packages"`
	FilesPerPackage int    `json:"files_per_package"`
	PyPackages      int    `json:"py_packages"`
	PyModules       int    `json:"py_modules"`
	Roots           int    `json:"roots"` // packages server.js requires directly
	Seed            uint64 `json:"seed"`
}

// DefaultWorkspace is about 3,600 files and 13 MB: 160 packages × 20 files
// in node_modules (sizes log-uniform from 300 B to 16 KB, as small JS
// files are) and 30 Python packages of 8 modules plus their dist-info.
var DefaultWorkspace = WorkspaceSpec{NodePackages: 160, FilesPerPackage: 20, PyPackages: 30, PyModules: 8, Roots: 8, Seed: 1}

// Workspace is a generated project: the deps tarball (tar + gzip) the
// benchmark uploads, and what a correct unpack and a running dev server
// must show.
type Workspace struct {
	Spec    WorkspaceSpec `json:"spec"`
	Tarball []byte        `json:"-"`
	// Digest is the tarball's sha256; the same spec always gives the same
	// bytes.
	Digest string `json:"tarball_sha256"`
	// NodeFiles are the regular files under node_modules, PyFiles those
	// that go into the venv's site-packages, AppFiles the project's own
	// (package.json, server.js).
	NodeFiles int   `json:"node_modules_files"`
	PyFiles   int   `json:"venv_files"`
	AppFiles  int   `json:"app_files"`
	Bytes     int64 `json:"bytes"` // uncompressed file contents
	// Modules is how many JS files the dev server loads at start.
	Modules int `json:"server_modules"`
	// ServerBody is the dev server's answer: "ready <sum> <modules>\n",
	// where sum is computed from every module it loaded.
	ServerBody string `json:"-"`
	// PyImports are the packages the deps check imports; PyValue what it
	// prints.
	PyImports []string `json:"-"`
	PyValue   string   `json:"-"`
}

// Files is the number of regular files in the tarball.
func (w *Workspace) Files() int { return w.NodeFiles + w.PyFiles + w.AppFiles }

const (
	valueMod   = 1000003
	serverPort = 3000
)

var words = []string{"parse", "token", "stream", "buffer", "event", "route", "cache", "queue", "state", "merge",
	"format", "encode", "decode", "watch", "build", "config", "plugin", "loader", "resolve", "graph"}

// GenerateWorkspace builds the project for spec, deterministically (a
// seeded generator, fixed modes and times, sorted entries).
func GenerateWorkspace(spec WorkspaceSpec) (*Workspace, error) {
	d := DefaultWorkspace
	if spec.NodePackages == 0 {
		spec.NodePackages = d.NodePackages
	}
	if spec.FilesPerPackage == 0 {
		spec.FilesPerPackage = d.FilesPerPackage
	}
	if spec.PyPackages == 0 {
		spec.PyPackages = d.PyPackages
	}
	if spec.PyModules == 0 {
		spec.PyModules = d.PyModules
	}
	if spec.Roots == 0 {
		spec.Roots = d.Roots
	}
	if spec.Seed == 0 {
		spec.Seed = d.Seed
	}
	if spec.FilesPerPackage < 5 {
		return nil, fmt.Errorf("workspace: a package has package.json, index.js, README.md, LICENSE and at least one lib file: files per package must be at least 5, got %d", spec.FilesPerPackage)
	}
	if spec.NodePackages < 1 || spec.PyPackages < 1 || spec.PyModules < 1 || spec.Roots < 1 || spec.Roots > spec.NodePackages {
		return nil, fmt.Errorf("workspace: need at least one node package, python package and module, and 1 ≤ roots ≤ packages: %+v", spec)
	}
	rng := rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15))
	w := &Workspace{Spec: spec}
	files := map[string][]byte{}
	add := func(name string, body []byte) {
		files[name] = body
		w.Bytes += int64(len(body))
	}

	// node_modules: package i requires up to two of the next 20, so the
	// graph is a DAG and the server's roots reach most of it.
	type pkg struct {
		name  string
		deps  []int
		used  []int // lib files index.js requires
		value int
		lib   int
	}
	pkgs := make([]pkg, spec.NodePackages)
	for i := range pkgs {
		p := &pkgs[i]
		p.name = fmt.Sprintf("%s-%s-%03d", words[rng.IntN(len(words))], words[rng.IntN(len(words))], i)
		p.lib = spec.FilesPerPackage - 4
		for k := 0; k < 2 && i+1 < spec.NodePackages; k++ {
			hi := min(spec.NodePackages-1, i+20)
			j := i + 1 + rng.IntN(hi-i)
			if !containsInt(p.deps, j) {
				p.deps = append(p.deps, j)
			}
		}
		sort.Ints(p.deps)
		for k := 0; k < min(3, p.lib); k++ {
			p.used = append(p.used, k)
		}
	}
	seedK := int(spec.Seed % valueMod)
	libK := func(i, k int) int { return (i*7919 + k*104729 + seedK) % valueMod }
	for i := len(pkgs) - 1; i >= 0; i-- {
		p := &pkgs[i]
		v := 0
		for _, k := range p.used {
			v += libK(i, k)
		}
		for _, j := range p.deps {
			v += pkgs[j].value
		}
		p.value = v % valueMod
	}
	for i, p := range pkgs {
		dir := "node_modules/" + p.name
		deps := make([]string, 0, len(p.deps))
		for _, j := range p.deps {
			deps = append(deps, fmt.Sprintf("%q: \"^1.%d.0\"", pkgs[j].name, j%10))
		}
		add(dir+"/package.json", fmt.Appendf(nil, "{\n  \"name\": %q,\n  \"version\": \"1.%d.%d\",\n  \"main\": \"index.js\",\n  \"license\": \"MIT\",\n  \"dependencies\": {%s}\n}\n",
			p.name, i%10, i%7, strings.Join(deps, ", ")))
		var idx strings.Builder
		idx.WriteString("'use strict';\n")
		var terms []string
		for _, k := range p.used {
			fmt.Fprintf(&idx, "const f%d = require('./lib/f%02d');\n", k, k)
			terms = append(terms, fmt.Sprintf("f%d()", k))
		}
		for n, j := range p.deps {
			fmt.Fprintf(&idx, "const d%d = require(%q);\n", n, pkgs[j].name)
			terms = append(terms, fmt.Sprintf("d%d.value()", n))
		}
		fmt.Fprintf(&idx, "const v = (%s) %% %d;\nexports.value = function () { return v; };\n", strings.Join(terms, " + "), valueMod)
		add(dir+"/index.js", filler(rng, []byte(idx.String()), 200, 2000))
		add(dir+"/README.md", filler(rng, fmt.Appendf(nil, "# %s\n\nGenerated by berth bench --task.\n", p.name), 500, 6000))
		add(dir+"/LICENSE", []byte("MIT License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy of this software.\n"))
		for k := 0; k < p.lib; k++ {
			head := fmt.Appendf(nil, "'use strict';\nmodule.exports = function () { return %d; };\n", libK(i, k))
			add(fmt.Sprintf("%s/lib/f%02d.js", dir, k), filler(rng, head, 300, 16000))
		}
		w.NodeFiles += 4 + p.lib
	}

	// The project: server.js requires the roots and answers with what they
	// computed, so a 200 with the right body proves every module resolved.
	seen := map[int]bool{}
	var walk func(i int)
	walk = func(i int) {
		if seen[i] {
			return
		}
		seen[i] = true
		for _, j := range pkgs[i].deps {
			walk(j)
		}
	}
	sum := 0
	var srv strings.Builder
	srv.WriteString("'use strict';\nconst http = require('http');\nconst roots = [\n")
	for i := 0; i < spec.Roots; i++ {
		walk(i)
		sum += pkgs[i].value
		fmt.Fprintf(&srv, "  require(%q),\n", pkgs[i].name)
	}
	for i := range seen {
		w.Modules += 1 + len(pkgs[i].used)
	}
	w.ServerBody = fmt.Sprintf("ready %d %d\n", sum%valueMod, w.Modules)
	fmt.Fprintf(&srv, "];\nlet sum = 0;\nfor (const r of roots) sum += r.value();\nconst body = 'ready ' + (sum %% %d) + ' %d\\n';\n", valueMod, w.Modules)
	fmt.Fprintf(&srv, "const port = Number(process.env.PORT || %d);\n", serverPort)
	srv.WriteString("http.createServer((req, res) => { res.setHeader('content-type', 'text/plain'); res.end(body); })\n  .listen(port, '127.0.0.1', () => console.log('listening on ' + port));\n")
	add("server.js", []byte(srv.String()))
	var rootDeps []string
	for i := 0; i < spec.Roots; i++ {
		rootDeps = append(rootDeps, fmt.Sprintf("    %q: \"^1.%d.0\"", pkgs[i].name, i%10))
	}
	add("package.json", fmt.Appendf(nil, "{\n  \"name\": \"bench-app\",\n  \"private\": true,\n  \"scripts\": {\"dev\": \"node server.js\"},\n  \"dependencies\": {\n%s\n  }\n}\n", strings.Join(rootDeps, ",\n")))
	w.AppFiles = 2

	// The venv's packages, unpacked to pysite/ and moved into the venv's
	// site-packages (whose path names the image's Python version).
	pySum := 0
	for i := 0; i < spec.PyPackages; i++ {
		name := fmt.Sprintf("bench_%s_%02d", words[rng.IntN(len(words))], i)
		var init strings.Builder
		var terms []string
		for k := 0; k < spec.PyModules; k++ {
			kv := (i*31337 + k*7717 + seedK) % valueMod
			pySum += kv
			add(fmt.Sprintf("pysite/%s/m%02d.py", name, k), filler(rng, fmt.Appendf(nil, "K = %d\n", kv), 300, 12000))
			fmt.Fprintf(&init, "from . import m%02d\n", k)
			terms = append(terms, fmt.Sprintf("m%02d.K", k))
		}
		fmt.Fprintf(&init, "VALUE = %s\n", strings.Join(terms, " + "))
		add("pysite/"+name+"/__init__.py", []byte(init.String()))
		di := fmt.Sprintf("pysite/%s-1.%d.0.dist-info/", name, i%10)
		add(di+"METADATA", fmt.Appendf(nil, "Metadata-Version: 2.1\nName: %s\nVersion: 1.%d.0\n", name, i%10))
		add(di+"INSTALLER", []byte("berth-bench\n"))
		add(di+"top_level.txt", []byte(name+"\n"))
		add(di+"RECORD", fmt.Appendf(nil, "%s/__init__.py,,\n", name))
		w.PyFiles += spec.PyModules + 5
		w.PyImports = append(w.PyImports, name)
	}
	w.PyValue = fmt.Sprint(pySum)

	tb, err := tarGz(files)
	if err != nil {
		return nil, err
	}
	w.Tarball = tb
	h := sha256.Sum256(tb)
	w.Digest = hex.EncodeToString(h[:])
	return w, nil
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// filler pads head to a size drawn log-uniformly from [lo, hi] with lines
// that look like code and comments (they compress as real sources do).
func filler(rng *rand.Rand, head []byte, lo, hi int) []byte {
	size := int(float64(lo) * math.Exp(rng.Float64()*math.Log(float64(hi)/float64(lo))))
	b := bytes.NewBuffer(head)
	js := !bytes.HasPrefix(head, []byte("K = ")) && !bytes.HasPrefix(head, []byte("# "))
	for b.Len() < size {
		w1, w2 := words[rng.IntN(len(words))], words[rng.IntN(len(words))]
		n := rng.IntN(100000)
		switch {
		case js && rng.IntN(3) == 0:
			fmt.Fprintf(b, "// %s the %s before it is handed on (%d)\n", w1, w2, n)
		case js:
			fmt.Fprintf(b, "function _%s_%s_%d(a, b) { return (a * %d + b) >>> 0; }\n", w1, w2, n, n%97)
		case bytes.HasPrefix(head, []byte("K = ")):
			fmt.Fprintf(b, "def _%s_%s_%d(a, b):\n    return (a * %d + b) %% 65521\n", w1, w2, n, n%97)
		default:
			fmt.Fprintf(b, "The %s step %s the input (%d).\n", w1, w2, n)
		}
	}
	return b.Bytes()
}

var tarTime = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// tarGz writes files (and their parent dirs) sorted by name, with fixed
// modes, owners and times, as tar + gzip.
func tarGz(files map[string][]byte) ([]byte, error) {
	dirs := map[string]bool{}
	var names []string
	for name := range files {
		names = append(names, name)
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, name := range names {
		hdr := &tar.Header{Name: name, ModTime: tarTime, Format: tar.FormatUSTAR}
		if strings.HasSuffix(name, "/") {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		} else {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(files[name]))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("workspace tar %s: %w", name, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(files[name]); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
