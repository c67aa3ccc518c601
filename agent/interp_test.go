package agent_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
)

// pythonWith returns an agent environment whose python3 has modules: the
// PATH one, else the system /usr/bin/python3 (Debian's python3-pandas and
// friends). It skips when neither has them.
func pythonWith(t *testing.T, modules ...string) []string {
	t.Helper()
	imp := "import " + strings.Join(modules, ", ")
	if exec.Command("python3", "-c", imp).Run() == nil {
		return []string{"PATH=" + os.Getenv("PATH")}
	}
	if exec.Command("/usr/bin/python3", "-c", imp).Run() == nil {
		return []string{"PATH=/usr/bin:/bin"}
	}
	t.Skipf("python modules %v not installed on this host (covered by the sandbox integration test)", modules)
	return nil
}

// needInterp skips when the host lacks an interpreter or python modules
// (they are in the sandbox base image and run in the integration test).
func needInterp(t *testing.T, bin string, pyModules ...string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		t.Skipf("%s not installed on this host", bin)
	}
	for _, m := range pyModules {
		if err := exec.Command("python3", "-c", "import "+m).Run(); err != nil {
			t.Skipf("python module %s not installed on this host (covered by the sandbox integration test)", m)
		}
	}
}

// pyKernelModules are what a python context's IPython kernel needs.
var pyKernelModules = []string{"ipykernel", "jupyter_client"}

// newPyClient starts an agent whose python3 can run an IPython kernel.
func newPyClient(t *testing.T, modules ...string) (*agenttest.Agent, *agentclient.Client) {
	t.Helper()
	return newClientEnv(t, pythonWith(t, append(append([]string{}, pyKernelModules...), modules...)...))
}

func newContext(t *testing.T, c *agentclient.Client, lang string) api.CodeContext {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc, err := c.CreateCodeContext(ctx, api.CreateCodeContextRequest{Language: lang})
	if err != nil {
		t.Fatalf("create %s context: %v", lang, err)
	}
	t.Cleanup(func() { c.DeleteCodeContext(context.Background(), cc.ID) })
	return cc
}

func runCode(t *testing.T, c *agentclient.Client, id, code string, timeout time.Duration) api.CodeRunResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.RunCode(ctx, api.RunCodeRequest{Context: id, Code: code, TimeoutMs: timeout.Milliseconds()}, nil)
	if err != nil {
		t.Fatalf("run %q: %v", code, err)
	}
	return res
}

func mainText(res api.CodeRunResult) string {
	for _, r := range res.Results {
		if r.IsMainResult {
			return r.Text
		}
	}
	return ""
}

func TestInterpPythonStateResultsErrors(t *testing.T) {
	_, c := newPyClient(t)
	cc := newContext(t, c, "python")
	res := runCode(t, c, cc.ID, "x = 20\nprint('hi')\nx + 1", 0)
	if mainText(res) != "21" || strings.Join(res.Logs.Stdout, "") != "hi\n" || res.Error != nil || res.ExecutionCount != 1 {
		t.Fatalf("first run: %+v", res)
	}
	res = runCode(t, c, cc.ID, "display({'a': [1, 2]})\nx * 2", 0)
	if len(res.Results) != 2 || res.Results[0].IsMainResult || string(res.Results[0].JSON) != `{"a": [1, 2]}` && string(res.Results[0].JSON) != `{"a":[1,2]}` || mainText(res) != "40" {
		t.Fatalf("display/json: %+v", res.Results)
	}
	res = runCode(t, c, cc.ID, "class R:\n  def _repr_html_(self): return '<b>r</b>'\n  def _repr_markdown_(self): return '*r*'\nR()", 0)
	if len(res.Results) != 1 || res.Results[0].HTML != "<b>r</b>" || res.Results[0].Markdown != "*r*" {
		t.Fatalf("rich repr: %+v", res.Results)
	}
	res = runCode(t, c, cc.ID, "def f():\n    raise ValueError('bad value')\nf()", 0)
	if res.Error == nil || res.Error.Name != "ValueError" || res.Error.Value != "bad value" ||
		!strings.Contains(res.Error.Traceback, "in f") || strings.Contains(res.Error.Traceback, "python_kernel") {
		t.Fatalf("error: %+v", res.Error)
	}
	res = runCode(t, c, cc.ID, "x", 0)
	if mainText(res) != "20" || res.Error != nil {
		t.Fatalf("after error: %+v", res)
	}
	// Output written straight to fd 1 by a subprocess is part of the run,
	// all of it before complete, and the sync mark never shows. (Its order
	// relative to print() is best effort: they travel different pipes.)
	res = runCode(t, c, cc.ID, "import subprocess\nsubprocess.run(['sh', '-c', 'head -c 100000 /dev/zero | tr \"\\\\0\" x; echo; echo sub-err >&2'])\nprint('after')", 0)
	if out := strings.Join(res.Logs.Stdout, ""); strings.Count(out, "x") != 100000 || len(out) != 100007 || !strings.Contains(out, "after\n") || strings.Join(res.Logs.Stderr, "") != "sub-err\n" {
		t.Fatalf("subprocess output: %d bytes stdout, stderr %q", len(out), res.Logs.Stderr)
	}
	// env applies to one run only.
	res, err := c.RunCode(context.Background(), api.RunCodeRequest{Context: cc.ID, Code: "import os\nos.environ.get('RUN_ONLY')", Env: map[string]string{"RUN_ONLY": "yes"}}, nil)
	if err != nil || mainText(res) != "yes" {
		t.Fatalf("run env: %+v %v", res, err)
	}
	if res = runCode(t, c, cc.ID, "os.environ.get('RUN_ONLY')", 0); len(res.Results) != 0 {
		t.Fatalf("run env leaked into the next run: %+v", res.Results)
	}
	res = runCode(t, c, cc.ID, "def (", 0)
	if res.Error == nil || res.Error.Name != "SyntaxError" {
		t.Fatalf("syntax error: %+v", res.Error)
	}
}

func TestInterpPythonStreaming(t *testing.T) {
	_, c := newPyClient(t)
	cc := newContext(t, c, "python")
	var mu sync.Mutex
	var firstOut, complete time.Time
	var order []string
	_, err := c.RunCode(context.Background(), api.RunCodeRequest{Context: cc.ID, Code: "import time\nprint('a', flush=True)\ntime.sleep(2)\nprint('b')"}, func(ev api.CodeEvent) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, ev.Type+":"+ev.Text)
		if ev.Type == "stdout" && firstOut.IsZero() {
			firstOut = time.Now()
		}
		if ev.Type == "complete" {
			complete = time.Now()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, "|") != "stdout:a\n|stdout:b\n|complete:" {
		t.Fatalf("order %q", order)
	}
	// The sleep is 2 s; the first line must not wait for it.
	if complete.Sub(firstOut) < time.Second {
		t.Fatalf("first stdout arrived only %v before complete: output was buffered", complete.Sub(firstOut))
	}
}

func TestInterpPythonTimeoutInterrupts(t *testing.T) {
	_, c := newPyClient(t)
	cc := newContext(t, c, "python")
	runCode(t, c, cc.ID, "keep = 'state'", 0)
	res := runCode(t, c, cc.ID, "while True:\n    pass", 500*time.Millisecond)
	if res.Error == nil || res.Error.Name != "KeyboardInterrupt" {
		t.Fatalf("infinite loop: want KeyboardInterrupt, got %+v (%+v)", res.Error, res)
	}
	res = runCode(t, c, cc.ID, "keep", 0)
	if mainText(res) != "state" {
		t.Fatalf("state after interrupt: %+v", res)
	}
	// A cancelled request interrupts too.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := c.RunCode(ctx, api.RunCodeRequest{Context: cc.ID, Code: "import time\ntime.sleep(60)"}, nil); err == nil {
		t.Fatal("cancelled run returned no error")
	}
	// The next run must not wait out the 60 s sleep: the cancel
	// interrupted it. The bound is far below 60 s and far above any
	// machine's slowness (it was 10 s, and a loaded CI machine took 12.9 s
	// to answer correctly).
	start := time.Now()
	res = runCode(t, c, cc.ID, "keep + '!'", 0)
	if took := time.Since(start); mainText(res) != "state!" || took > 45*time.Second {
		t.Fatalf("after cancel (%s): %+v", took.Round(time.Millisecond), res)
	}
}

func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil {
		return false
	}
	// A zombie still answers kill 0; look at its state.
	st, _ := exec.Command("ps", "-o", "stat=", "-p", fmt.Sprint(pid)).Output()
	return len(st) > 0 && !strings.HasPrefix(strings.TrimSpace(string(st)), "Z")
}

func TestInterpDeleteAndExit(t *testing.T) {
	_, c := newPyClient(t)
	cc := newContext(t, c, "python")
	res := runCode(t, c, cc.ID, "import os\nos.getpid()", 0)
	var pid int
	fmt.Sscan(mainText(res), &pid)
	if pid <= 0 || !pidAlive(pid) {
		t.Fatalf("interpreter pid %q not alive", mainText(res))
	}
	// os._exit ends the interpreter: a clear error, then restart works.
	res = runCode(t, c, cc.ID, "import os\nos._exit(1)", 0)
	if res.Error == nil || res.Error.Name != "InterpreterExited" || !strings.Contains(res.Error.Value, "exit code 1") {
		t.Fatalf("os._exit: %+v", res.Error)
	}
	if _, err := c.RestartCodeContext(context.Background(), cc.ID); err != nil {
		t.Fatal(err)
	}
	res = runCode(t, c, cc.ID, "import os\nos.getpid()", 0)
	fmt.Sscan(mainText(res), &pid)
	if res.Error != nil || pid <= 0 || !pidAlive(pid) {
		t.Fatalf("after restart: %+v", res)
	}
	if err := c.DeleteCodeContext(context.Background(), cc.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for pidAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if pidAlive(pid) {
		t.Fatalf("interpreter %d still alive after delete", pid)
	}
	list, err := c.ListCodeContexts(context.Background())
	for _, l := range list {
		if l.ID == cc.ID {
			err = fmt.Errorf("deleted context %s listed", cc.ID)
		}
	}
	if err != nil {
		t.Fatalf("list after delete: %v %v", list, err)
	}
	if _, err := c.RunCode(context.Background(), api.RunCodeRequest{Context: cc.ID, Code: "1"}, nil); err == nil {
		t.Fatal("run in deleted context succeeded")
	}
}

func TestInterpMissingInterpreter(t *testing.T) {
	_, c := newClientEnv(t, []string{"PATH=/nonexistent"})
	_, err := c.CreateCodeContext(context.Background(), api.CreateCodeContextRequest{Language: "python"})
	if err == nil || !strings.Contains(err.Error(), "python3 not found in the sandbox image") {
		t.Fatalf("want a clear missing-interpreter error, got %v", err)
	}
}

func TestInterpJavaScript(t *testing.T) {
	needInterp(t, "node")
	_, c := newClient(t)
	cc := newContext(t, c, "javascript")
	res := runCode(t, c, cc.ID, "const a = 40\nlet b = 2\nfunction add(x, y) { return x + y }\nconsole.log('hello', a)\nadd(a, b)", 0)
	if mainText(res) != "42" || strings.Join(res.Logs.Stdout, "") != "hello 40\n" || res.Error != nil {
		t.Fatalf("js first: %+v", res)
	}
	res = runCode(t, c, cc.ID, "const v = await new Promise(r => setTimeout(() => r(a + 1), 50))\nv * 2", 0)
	if mainText(res) != "82" || res.Error != nil {
		t.Fatalf("top-level await: %+v", res)
	}
	res = runCode(t, c, cc.ID, "({sum: add(v, b), list: [1, 2]})", 0)
	var got map[string]any
	if len(res.Results) != 1 || json.Unmarshal(res.Results[0].JSON, &got) != nil || got["sum"] != 43.0 {
		t.Fatalf("state after await / json: %+v", res)
	}
	res = runCode(t, c, cc.ID, "process.stdout.write('raw\\n'); const a = 1; class K { v() { return 7 } }\nnew K().v() + a", 0)
	if mainText(res) != "8" || strings.Join(res.Logs.Stdout, "") != "raw\n" {
		t.Fatalf("redeclare const / class / raw stdout: %+v", res)
	}
	res = runCode(t, c, cc.ID, "null.x", 0)
	if res.Error == nil || res.Error.Name != "TypeError" || strings.Contains(res.Error.Traceback, "runInContext") {
		t.Fatalf("js error: %+v", res.Error)
	}
	res = runCode(t, c, cc.ID, "while (true) {}", 300*time.Millisecond)
	if res.Error == nil || res.Error.Name != "KeyboardInterrupt" {
		t.Fatalf("js loop: %+v", res.Error)
	}
	if res = runCode(t, c, cc.ID, "a + b", 0); mainText(res) != "3" {
		t.Fatalf("js state after interrupt: %+v", res)
	}
}

func TestInterpTypeScript(t *testing.T) {
	needInterp(t, "node")
	_, c := newClient(t)
	cc := newContext(t, c, "typescript")
	res := runCode(t, c, cc.ID, "interface P { name: string; age: number }\nfunction greet(p: P): string { return `hi ${p.name} (${p.age})` }\nconst who: P = {name: 'ada', age: 36}\ngreet(who)", 0)
	if mainText(res) != "hi ada (36)" || res.Error != nil {
		t.Fatalf("ts: %+v", res)
	}
	if res = runCode(t, c, cc.ID, "greet({name: 'bob', age: 1} as P)", 0); mainText(res) != "hi bob (1)" {
		t.Fatalf("ts state: %+v", res)
	}
	if res = runCode(t, c, cc.ID, "enum Color { Red = 2 }\nconst n: number = await Promise.resolve(Color.Red)\nn * 21", 0); mainText(res) != "42" {
		t.Fatalf("ts enum + await: %+v", res)
	}
	if res = runCode(t, c, cc.ID, "let x: = 1", 0); res.Error == nil || res.Error.Name != "SyntaxError" {
		t.Fatalf("ts syntax error: %+v", res.Error)
	}
}

func TestInterpParallelContexts(t *testing.T) {
	needInterp(t, "node")
	_, c := newPyClient(t)
	var ids []string
	for i := 0; i < 6; i++ {
		lang := "python"
		if i%2 == 1 {
			lang = "javascript"
		}
		ids = append(ids, newContext(t, c, lang).ID)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	start := time.Now()
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := fmt.Sprintf("import time\nn = %d\ntime.sleep(1)\nn * 10", i)
			if i%2 == 1 {
				code = fmt.Sprintf("var n = %d\nawait new Promise(r => setTimeout(r, 1000))\nn * 10", i)
			}
			res, err := c.RunCode(context.Background(), api.RunCodeRequest{Context: id, Code: code}, nil)
			if err == nil && mainText(res) != fmt.Sprint(i*10) {
				err = fmt.Errorf("context %d: got %+v", i, res)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Serial would take 6 s; parallel about 1 s. The bound is generous.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("6 one-second runs took %v: contexts did not run in parallel", d)
	}
}

func TestInterpDataAnalysis(t *testing.T) {
	_, c := newClientEnv(t, pythonWith(t, "pandas", "ipykernel", "jupyter_client"))
	cc := newContext(t, c, "python")
	res := runCode(t, c, cc.ID, `import pandas as pd, io
csv = "region,revenue,cost\nnorth,100,60\nsouth,80,70\nnorth,50,20\nsouth,40,10\n"
df = pd.read_csv(io.StringIO(csv))
df["margin"] = (df.revenue - df.cost) / df.revenue
df.groupby("region")["margin"].mean().sort_values(ascending=False).round(4).to_dict()`, 0)
	var got map[string]float64
	if res.Error != nil || len(res.Results) != 1 || json.Unmarshal(res.Results[0].JSON, &got) != nil {
		t.Fatalf("analysis: %+v", res)
	}
	// north: (0.4 + 0.6)/2 = 0.5; south: (0.125 + 0.75)/2 = 0.4375
	if got["north"] != 0.5 || got["south"] != 0.4375 {
		t.Fatalf("group means %v", got)
	}
	res = runCode(t, c, cc.ID, "df", 0)
	if len(res.Results) != 1 || !strings.Contains(res.Results[0].HTML, "<table") || !strings.Contains(res.Results[0].Text, "margin") {
		t.Fatalf("DataFrame result: %+v", res.Results)
	}
}

func TestInterpMatplotlibPNG(t *testing.T) {
	_, c := newClientEnv(t, pythonWith(t, "matplotlib", "ipykernel", "jupyter_client"))
	cc := newContext(t, c, "python")
	res := runCode(t, c, cc.ID, "import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(4, 3), dpi=50)\nplt.bar(['a', 'b'], [3, 5])\nNone", 0)
	if res.Error != nil || len(res.Results) != 1 || res.Results[0].PNG == "" {
		t.Fatalf("chart: %+v", res)
	}
	data, err := base64.StdEncoding.DecodeString(res.Results[0].PNG)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	// IPython's inline backend crops to the drawn area (bbox tight).
	if b := img.Bounds(); b.Dx() < 100 || b.Dx() > 200 || b.Dy() < 75 || b.Dy() > 150 {
		t.Fatalf("png %v, want about 200x150", b)
	}
	// Figures are closed after each run.
	if res = runCode(t, c, cc.ID, "len(plt.get_fignums())", 0); mainText(res) != "0" {
		t.Fatalf("figures left open: %+v", res)
	}
}

func newClientEnv(t *testing.T, env []string) (*agenttest.Agent, *agentclient.Client) {
	t.Helper()
	a := agenttest.StartWith(t, func(cfg *agent.Config) { cfg.BaseEnv = env })
	c := agentclient.New(a.Socket)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return a, c
}

func TestInterpRunsAsDefaultUser(t *testing.T) {
	pythonWith(t, pyKernelModules...)
	if syscall.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	// The system python: a python under /root (pyenv) is not executable
	// for tester.
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	a := agenttest.StartWith(t, func(cfg *agent.Config) {
		cfg.DefaultUser = "tester"
		cfg.BaseEnv = []string{"PATH=/usr/bin:/bin"}
	})
	c := agentclient.New(a.Socket)
	t.Cleanup(c.Close)
	cc := newContext(t, c, "python")
	if cc.Cwd != a.TesterHome {
		t.Fatalf("cwd %q, want %q", cc.Cwd, a.TesterHome)
	}
	res := runCode(t, c, cc.ID, "import os\n(os.getuid(), os.getgid(), os.getcwd())", 0)
	if want := "(1000, 1000, '" + a.TesterHome + "')"; mainText(res) != want {
		t.Fatalf("got %q, want %q", mainText(res), want)
	}
}

// TestInterpUser: a code context runs as the user it asks for (root on
// request, another account by name); the default is the agent's default
// user (root in this test server), the control.
func TestInterpUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	_, c := newPyClient(t)
	ctx := context.Background()
	def := newContext(t, c, "python")
	if got := mainText(runCode(t, c, def.ID, "import os\nos.getuid()", 0)); got != "0" || def.User != "root" {
		t.Fatalf("default context runs as uid %s (user %q), want the default user root", got, def.User)
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 that another user can run")
	}
	cc, err := c.CreateCodeContext(ctx, api.CreateCodeContextRequest{Language: "python", User: "nobody", Cwd: "/", Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteCodeContext(context.Background(), cc.ID) })
	if got := mainText(runCode(t, c, cc.ID, "import os\nos.getuid()", 0)); got != "65534" || cc.User != "nobody" {
		t.Fatalf("context for nobody runs as uid %s (user %q)", got, cc.User)
	}
	if _, err := c.CreateCodeContext(ctx, api.CreateCodeContextRequest{Language: "python", User: "no-such-user"}); err == nil {
		t.Fatal("a context for an unknown user was created")
	}
}
