package server

import (
	"os/exec"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestCodeRunBuffered covers the JSON (non-SSE) answer of a code run and
// the validation in front of the agent.
func TestCodeRunBuffered(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed on this host")
	}
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
	if len(list.Contexts) != 1 {
		t.Fatalf("list: %+v", list)
	}
	e.json(t, "DELETE", "/code/contexts/"+cc.ID, nil, 204, nil)
	e.json(t, "POST", "/code/contexts/"+cc.ID+"/restart", nil, 404, nil)
	e.waitReleased(t)
}
