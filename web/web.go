package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed dist
var dist embed.FS

// Prefix is the URL path the console is served under. The page refers to its
// assets relatively and to the API by absolute /v1/ paths, so it must be
// served from the API's origin.
const Prefix = "/console/"

// csp confines the page to its own script and its own origin. Sandbox names,
// errors and terminal output are attacker-influenced text; the UI renders
// them with textContent (never innerHTML), and should that ever slip, this
// policy still stops injected markup from loading script or sending the API
// key (in localStorage) to another host with fetch/WebSocket. frame-ancestors
// 'none' stops clickjacking of the terminal. style-src needs 'unsafe-inline'
// because xterm.js injects <style> elements for its theme.
const csp = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

type asset struct {
	body, gz    []byte
	contentType string
	etag        string
}

var loadAssets = sync.OnceValue(func() map[string]*asset {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // "dist" is a literal that go:embed already resolved
	}
	out := map[string]*asset{}
	_ = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		a := &asset{body: b, contentType: contentType(p), etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		if len(b) > 1024 && compressible(a.contentType) {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			_, _ = zw.Write(b)
			_ = zw.Close()
			a.gz = buf.Bytes()
		}
		out[p] = a
		return nil
	})
	return out
})

func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

func compressible(ct string) bool {
	return strings.HasPrefix(ct, "text/") || strings.HasPrefix(ct, "application/json")
}

// Handler serves the console under Prefix: index.html at Prefix itself, the
// bundled assets beside it, and a redirect from the bare "/console". It
// needs no authentication: the files are static and public; the API calls
// the page makes carry the user's key.
func Handler() http.Handler { return handler{assets: loadAssets()} }

// Mount returns a handler that serves the console under Prefix and passes
// every other request to api. Console paths never reach api, so they need
// no exemption from its authentication; API paths never reach the console.
func Mount(api http.Handler) http.Handler {
	console := Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/console" || strings.HasPrefix(r.URL.Path, Prefix) {
			console.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

type handler struct{ assets map[string]*asset }

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Content-Security-Policy", csp)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	if p == "/console" {
		target := Prefix
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, target, http.StatusMovedPermanently)
		return
	}
	name, ok := strings.CutPrefix(p, Prefix)
	if name == "" {
		name = "index.html"
	}
	// An exact lookup in a map of embedded files: there is no filesystem
	// path to traverse, so "../" or encoded variants simply miss.
	a := h.assets[name]
	if !ok || a == nil {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	// Asset names carry no content hash, so browsers must revalidate on
	// every load (cheap: ETag → 304) lest a new daemon run an old app.js.
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Content-Type", a.contentType)
	body, etag := a.body, a.etag
	if a.gz != nil {
		hdr.Add("Vary", "Accept-Encoding")
		if acceptsGzip(r.Header.Get("Accept-Encoding")) {
			hdr.Set("Content-Encoding", "gzip")
			body, etag = a.gz, strings.TrimSuffix(a.etag, `"`)+`-gz"`
		}
	}
	hdr.Set("ETag", etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(body))
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip: listed
// (or "*") with a nonzero q value.
func acceptsGzip(h string) bool {
	for part := range strings.SplitSeq(h, ",") {
		fields := strings.Split(part, ";")
		coding := strings.ToLower(strings.TrimSpace(fields[0]))
		if coding != "gzip" && coding != "*" {
			continue
		}
		for _, param := range fields[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(param), "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				if q, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil || q <= 0 {
					return false
				}
			}
		}
		return true
	}
	return false
}
