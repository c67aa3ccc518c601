package client

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestCodeContextsSDK drives code contexts through the client, the HTTP
// server (SSE) and a real in-process agent.
func TestCodeContextsSDK(t *testing.T) {
	needIPython(t)
	c, _ := newDevClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc, err := c.CreateCodeContext(ctx, "dev", api.CreateCodeContextRequest{Language: "python"})
	if err != nil || cc.ID == "" || cc.Language != "python" {
		t.Fatalf("create: %+v %v", cc, err)
	}
	var types []string
	res, err := c.RunCode(ctx, "dev", api.RunCodeRequest{Context: cc.ID, Code: "x = 6\nprint('p')\nx * 7"}, func(ev api.CodeEvent) {
		types = append(types, ev.Type)
	})
	if err != nil || strings.Join(types, ",") != "stdout,result,complete" || res.ExecutionCount != 1 ||
		len(res.Results) != 1 || res.Results[0].Text != "42" || !res.Results[0].IsMainResult || res.Context != cc.ID {
		t.Fatalf("run: %v %+v %v", types, res, err)
	}
	res, err = c.RunCode(ctx, "dev", api.RunCodeRequest{Context: cc.ID, Code: "1/0"}, nil)
	if err != nil || res.Error == nil || res.Error.Name != "ZeroDivisionError" || res.ExecutionCount != 2 {
		t.Fatalf("error run: %+v %v", res, err)
	}
	list, err := c.ListCodeContexts(ctx, "dev")
	listed := false
	for _, l := range list {
		listed = listed || l.ID == cc.ID
	}
	if err != nil || !listed { // the rest are the default contexts
		t.Fatalf("list: %+v %v", list, err)
	}
	if _, err := c.RestartCodeContext(ctx, "dev", cc.ID); err != nil {
		t.Fatal(err)
	}
	res, err = c.RunCode(ctx, "dev", api.RunCodeRequest{Context: cc.ID, Code: "'x' in globals()"}, nil)
	if err != nil || len(res.Results) != 1 || res.Results[0].Text != "False" || res.ExecutionCount != 1 {
		t.Fatalf("after restart: %+v %v", res, err)
	}
	if err := c.DeleteCodeContext(ctx, "dev", cc.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunCode(ctx, "dev", api.RunCodeRequest{Context: cc.ID, Code: "1"}, nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("run in deleted context: %v", err)
	}
	// The default context of a language is created on first use.
	res, err = c.RunCode(ctx, "dev", api.RunCodeRequest{Language: "python", Code: "2 + 2"}, nil)
	if err != nil || len(res.Results) != 1 || res.Results[0].Text != "4" {
		t.Fatalf("default context: %+v %v", res, err)
	}
	if _, err := c.RunCode(ctx, "dev", api.RunCodeRequest{Language: "cobol", Code: "1"}, nil); err == nil {
		t.Fatal("unsupported language accepted")
	}
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
