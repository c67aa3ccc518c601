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
// Screenshots go to $BERTH_ARTIFACTS (default /tmp/berth-artifacts):
// console.png after the command ran, console-reload.png after the reload
// replayed it, <prefix>-failure.png when a wait times out.
//
// TestConsoleFakeTerminal and TestConsoleFakeLogin run the same scenario
// against an in-process fake API (real console handler, /bin/sh on a local
// pty) and need only Chromium. BERTH_WEB_PROXY=1 lets TestConsoleTerminal
// run against a daemon that does not mount the console yet, by fronting it
// with web.Mount in the test process.
package browser
