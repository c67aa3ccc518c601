// Package web serves the browser console: a static page, embedded from dist/
// with go:embed, that lists sandboxes and opens xterm.js terminals into them.
//
// The page is public (it holds no data); everything it shows comes from the
// authenticated API, with the API key the user types in, kept in the
// browser's localStorage. The bundle is built from ui/ by
// scripts/web-build.sh (npm + esbuild, no CDN) and dist/ is committed so that
// `go build` needs no Node.js.
//
// The daemon wraps its API handler with Mount, which sends /console and
// /console/... here and everything else to the API (and its auth).
package web
