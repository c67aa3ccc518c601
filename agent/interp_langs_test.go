package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// Node-like JavaScript, bash contexts, languages refused, default
// contexts and queued runs (issue 12 items 16-19).

// TestInterpJavaScriptNode: a JS context sees what a node program sees
// (global, require, module, __dirname, static and dynamic imports) and a
// trailing promise shows its value.
func TestInterpJavaScriptNode(t *testing.T) {
	needInterp(t, "node")
	_, c := newClient(t)
	cc := newContext(t, c, "javascript")
	for _, tc := range []struct{ code, want string }{
		{"global.x = 1; x", "1"},
		{"Promise.resolve(123)", "123"},
		{"await Promise.resolve(124)", "124"},
		{"require('path').join('a', 'b')", "a/b"},
		{"[typeof module, typeof exports, typeof __filename, __dirname === process.cwd()].join()", "object,object,string,true"},
		{"import fs from 'node:fs'\nimport * as p from 'node:path'\nimport { sep as s } from 'node:path'\nfs.existsSync('/') + s", "true/"},
		{"typeof fs.statSync + typeof p.join + s", "functionfunction/"},
		{"const { basename } = await import('node:path'); basename('/a/b')", "b"},
		{"[] instanceof Array && require('fs').readdirSync('/') instanceof Array", "true"},
	} {
		res := runCode(t, c, cc.ID, tc.code, 0)
		if res.Error != nil || mainText(res) != tc.want {
			t.Errorf("%q: got %q (error %+v), want %q", tc.code, mainText(res), res.Error, tc.want)
		}
	}
	res := runCode(t, c, cc.ID, "await new Promise(() => {})", 500*time.Millisecond)
	if res.Error == nil || res.Error.Name != "KeyboardInterrupt" {
		t.Fatalf("pending promise at the timeout: %+v", res)
	}
	ts := newContext(t, c, "typescript")
	if res := runCode(t, c, ts.ID, "import { join } from 'node:path'", 0); res.Error != nil {
		t.Fatalf("ts import: %+v", res.Error)
	}
	if res := runCode(t, c, ts.ID, "const j: string = join('x', 'y'); j", 0); mainText(res) != "x/y" {
		t.Fatalf("ts import kept for a later cell: %+v", res)
	}
}

// TestInterpBash: a bash context keeps cwd, variables and functions,
// streams both outputs, reports a failing cell's exit status, sets run env
// vars only for the run, and survives an interrupt.
func TestInterpBash(t *testing.T) {
	needInterp(t, "bash")
	_, c := newClient(t)
	cc := newContext(t, c, "bash")
	res := runCode(t, c, cc.ID, "cd /tmp && X=5 && declare -A m=([k]=v) && f() { echo \"f$1\"; }", 0)
	if res.Error != nil {
		t.Fatalf("setup: %+v", res.Error)
	}
	res = runCode(t, c, cc.ID, "pwd; echo $X ${m[k]}; f 1; echo e >&2", 0)
	if got := strings.Join(res.Logs.Stdout, ""); got != "/tmp\n5 v\nf1\n" || strings.Join(res.Logs.Stderr, "") != "e\n" || res.Error != nil {
		t.Fatalf("state: %q %+v", got, res)
	}
	res = runCode(t, c, cc.ID, "echo before; (exit 3)", 0)
	if res.Error == nil || res.Error.Name != "ExitError" || res.Error.Value != "exit status 3" || strings.Join(res.Logs.Stdout, "") != "before\n" {
		t.Fatalf("failing cell: %+v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.RunCode(ctx, api.RunCodeRequest{Context: cc.ID, Code: "echo \"$ONLY it's\"", Env: map[string]string{"ONLY": "now"}}, nil)
	if err != nil || strings.Join(res.Logs.Stdout, "") != "now it's\n" {
		t.Fatalf("run env: %+v %v", res, err)
	}
	if res = runCode(t, c, cc.ID, "echo \"[${ONLY-unset}]\"", 0); strings.Join(res.Logs.Stdout, "") != "[unset]\n" {
		t.Fatalf("run env stays: %+v", res)
	}
	start := time.Now()
	res = runCode(t, c, cc.ID, "while true; do sleep 0.1; done; echo after", 500*time.Millisecond)
	if res.Error == nil || res.Error.Name != "KeyboardInterrupt" || time.Since(start) > 20*time.Second || strings.Contains(strings.Join(res.Logs.Stdout, ""), "after") {
		t.Fatalf("interrupted loop: %+v", res)
	}
	if res = runCode(t, c, cc.ID, "echo $X $PWD", 0); strings.Join(res.Logs.Stdout, "") != "5 /tmp\n" || res.Error != nil {
		t.Fatalf("state after the interrupt: %+v", res)
	}
}

// TestInterpLanguagesRefused: R and Java are refused with an error that
// names what is missing.
func TestInterpLanguagesRefused(t *testing.T) {
	_, c := newClientEnv(t, []string{"PATH=/nonexistent"})
	for _, l := range []string{"r", "java"} {
		_, err := c.CreateCodeContext(context.Background(), api.CreateCodeContextRequest{Language: l})
		if err == nil || !strings.Contains(err.Error(), "not installed in the sandbox image") {
			t.Fatalf("%s: %v", l, err)
		}
	}
}

// TestInterpDefaultsListed: the default contexts are listed before any
// run, and a run by language uses the listed one.
func TestInterpDefaultsListed(t *testing.T) {
	needInterp(t, "python3")
	_, c := newPyClient(t)
	ctx := context.Background()
	list, err := c.ListCodeContexts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var py string
	for _, cc := range list {
		if cc.Language == "python" {
			py = cc.ID
		}
	}
	if py == "" {
		t.Fatalf("no default python context listed: %+v", list)
	}
	res, err := c.RunCode(ctx, api.RunCodeRequest{Language: "python", Code: "1"}, nil)
	if err != nil || res.Context != py {
		t.Fatalf("run by language used %q, want the listed %q (%v)", res.Context, py, err)
	}
}

// TestInterpBusyContextStartsAtOnce: a run queued behind another run of
// its context is accepted (the stream starts) before its turn comes.
func TestInterpBusyContextStartsAtOnce(t *testing.T) {
	needInterp(t, "python3")
	_, c := newPyClient(t)
	cc := newContext(t, c, "python")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	runCode(t, c, cc.ID, "1", 0) // the kernel is up
	type ended struct {
		at  time.Time
		err error
	}
	first := make(chan ended, 1)
	running := make(chan struct{})
	go func() {
		_, err := c.RunCode(ctx, api.RunCodeRequest{Context: cc.ID, Code: "print('sleeping', flush=True)\nimport time\ntime.sleep(8)"}, func(ev api.CodeEvent) {
			if ev.Type == api.CodeEventStdout {
				close(running)
			}
		})
		first <- ended{time.Now(), err}
	}()
	<-running // the context is busy with the first run
	started := make(chan time.Time, 1)
	res, err := c.RunCodeStarted(ctx, api.RunCodeRequest{Context: cc.ID, Code: "2"}, func() { started <- time.Now() }, nil)
	if err != nil || mainText(res) != "2" {
		t.Fatalf("queued run: %+v %v", res, err)
	}
	f := <-first
	if f.err != nil {
		t.Fatal(f.err)
	}
	// Its stream started while the first run still ran, not at its turn.
	if s := <-started; !s.Before(f.at) {
		t.Fatalf("the queued run's stream started %s after the first run ended, not at once", s.Sub(f.at))
	}
}
