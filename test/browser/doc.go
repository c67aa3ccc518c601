// Package browser is the end-to-end test of the browser console (package
// web): it drives Debian's headless Chromium over the DevTools protocol
// (chromedp, no Node.js) against a running berth daemon, types into an
// xterm.js terminal of a real sandbox and reads the answer off the screen.
//
// The test is behind the build tag "browser" because it needs root, Chromium
// and a daemon:
//
//	BERTH_URL=http://127.0.0.1:7070 BERTH_API_KEY=bk_... \
//	    go test -tags browser -v ./test/browser/
//
// Screenshots go to $BERTH_ARTIFACTS (default /tmp/berth-artifacts).
package browser
