package server

import (
	"os"
	"os/exec"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestCodeRunBuffered covers the JSON (non-SSE) answer of a code run and
// the validation in front of the agent.
func TestCodeRunBuffered(t *testing.T) {
	needIPython(t)
	e := newDevEnv(t)
	var cc api.CodeContext
	e.json(t, "POST", "/code/contexts", api.CreateCodeContextRequest{Language: "python"}, 201, &cc)
	var res api.CodeRunResult
	e.json(t, "POST", "/code/run", api.RunCodeRequest{Context: cc.ID, Code: "print('o')\n[1, 2]"}, 200, &res)
	if res.Context != cc.ID || res.ExecutionCount != 1 || len(res.Events) != 3 || len(res.Results) != 1 ||
		string(res.Results[0].JSON) != "[1, 2]" && string(res.Results[0].JSON) != "[1,2]" || len(res.Logs.Stdout) != 1 {
		t.Fatalf("buffered run: %+v", res)
	}
	e.json(t, "POST", "/code/run", api.RunCodeRequest{Context: cc.ID, Language: "python", Code: "1"}, 400, nil)
	e.json(t, "POST", "/code/run", api.RunCodeRequest{Language: "cobol", Code: "1"}, 400, nil)
	e.json(t, "POST", "/code/run", api.RunCodeRequest{Context: "../x", Code: "1"}, 400, nil)
	e.json(t, "POST", "/code/run", api.RunCodeRequest{Context: "nope", Code: "1"}, 404, nil)
	var list api.CodeContextList
	e.json(t, "GET", "/code/contexts", nil, 200, &list)
	listed := false
	for _, l := range list.Contexts {
		listed = listed || l.ID == cc.ID
	}
	if !listed { // the rest are the default contexts, listed before their first run
		t.Fatalf("list: %+v", list)
	}
	e.json(t, "DELETE", "/code/contexts/"+cc.ID, nil, 204, nil)
	e.json(t, "POST", "/code/contexts/"+cc.ID+"/restart", nil, 404, nil)
	e.waitReleased(t)
}

// needIPython makes python3 on PATH one that can run a python context's
// IPython kernel (Debian's /usr/bin/python3 with python3-ipykernel when
// the PATH one lacks it), or skips.
func needIPython(t *testing.T) {
	t.Helper()
	const imp = "import ipykernel, jupyter_client"
	if exec.Command("python3", "-c", imp).Run() == nil {
		return
	}
	if exec.Command("/usr/bin/python3", "-c", imp).Run() == nil {
		t.Setenv("PATH", "/usr/bin:"+os.Getenv("PATH"))
		return
	}
	t.Skip("no python3 with ipykernel and jupyter_client on this host")
}
