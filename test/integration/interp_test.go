//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestCodeInterpreterDataAnalysis runs the notebook flow through the real
// daemon: a python context in the base image (python3 with pandas and
// matplotlib from Debian), a CSV analysis with checked values and a bar
// chart returned as a PNG.
func TestCodeInterpreterDataAnalysis(t *testing.T) {
	// lite (1/16 vCPU) makes importing pandas take a long time; the point
	// here is behaviour, not the smallest size.
	sandbox(t, api.CreateSandboxRequest{Name: "it-interp", Instance: "standard-1"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cc, err := d.c.CreateCodeContext(ctx, "it-interp", api.CreateCodeContextRequest{Language: "python"})
	if err != nil {
		t.Fatalf("create python context: %v", err)
	}
	runPy := func(code string) api.CodeRunResult {
		t.Helper()
		res, err := d.c.RunCode(ctx, "it-interp", api.RunCodeRequest{Context: cc.ID, Code: code, TimeoutMs: 240000}, nil)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if res.Error != nil {
			t.Fatalf("code raised %s: %s\n%s", res.Error.Name, res.Error.Value, res.Error.Traceback)
		}
		return res
	}
	res, err := d.c.RunCode(ctx, "it-interp", api.RunCodeRequest{Context: cc.ID, Code: "import pandas, matplotlib, numpy"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != nil {
		t.Fatalf("the base image lacks the data stack (%s: %s): rebuild it with `berth image build-base`", res.Error.Name, res.Error.Value)
	}

	res = runPy(`import pandas as pd, io
csv = "region,revenue,cost\nnorth,100,60\nsouth,80,70\nnorth,50,20\nsouth,40,10\n"
df = pd.read_csv(io.StringIO(csv))
df["margin"] = (df.revenue - df.cost) / df.revenue
df.groupby("region")["margin"].mean().sort_values(ascending=False).round(4).to_dict()`)
	var means map[string]float64
	if len(res.Results) != 1 || json.Unmarshal(res.Results[0].JSON, &means) != nil {
		t.Fatalf("analysis results: %+v", res.Results)
	}
	if means["north"] != 0.5 || means["south"] != 0.4375 {
		t.Fatalf("group means %v, want north 0.5 south 0.4375", means)
	}
	res = runPy("df")
	if len(res.Results) != 1 || !strings.Contains(res.Results[0].HTML, "<table") {
		t.Fatalf("DataFrame has no html: %+v", res.Results)
	}

	res = runPy(`import matplotlib.pyplot as plt
fig = plt.figure(figsize=(4, 3), dpi=50)
s = df.groupby("region")["margin"].mean()
plt.bar(list(s.index), list(s.values))
print("plotted")`)
	if len(res.Results) != 1 || res.Results[0].PNG == "" || strings.Join(res.Logs.Stdout, "") != "plotted\n" {
		t.Fatalf("chart: %+v", res)
	}
	data, err := base64.StdEncoding.DecodeString(res.Results[0].PNG)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	// IPython's inline backend crops to the drawn area (bbox tight).
	if b := img.Bounds(); b.Dx() < 100 || b.Dx() > 200 || b.Dy() < 75 || b.Dy() > 150 {
		t.Fatalf("chart is %v, want about 200x150", b)
	}
	var chart struct {
		Type     string `json:"type"`
		Elements []struct {
			Label string  `json:"label"`
			Value float64 `json:"value"`
		} `json:"elements"`
	}
	if err := json.Unmarshal(res.Results[0].Chart, &chart); err != nil || chart.Type != "bar" || len(chart.Elements) != 2 ||
		chart.Elements[0].Label != "north" || chart.Elements[0].Value != 0.5 {
		t.Fatalf("chart data %s (%v)", res.Results[0].Chart, err)
	}
	if err := d.c.DeleteCodeContext(ctx, "it-interp", cc.ID); err != nil {
		t.Fatal(err)
	}
}

// TestCodeInterpreterLatencyAndMemory reports the figures the interpreter
// issue asks for, in the default image: first runCode on a fresh context,
// later runCode of 1+1, and the RSS of idle Python and JavaScript contexts.
// It asserts only that the calls work.
func TestCodeInterpreterLatencyAndMemory(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-interp-lat"})
	for _, lang := range []string{"python", "javascript"} {
		var creates, firsts, laters []time.Duration
		for i := 0; i < 5; i++ {
			tc := time.Now()
			cc, err := d.c.CreateCodeContext(ctx, "it-interp-lat", api.CreateCodeContextRequest{Language: lang})
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			res, err := d.c.RunCode(ctx, "it-interp-lat", api.RunCodeRequest{Code: "1+1", Context: cc.ID}, nil)
			firsts = append(firsts, time.Since(t0))
			creates = append(creates, time.Since(tc))
			if err != nil || len(res.Results) == 0 || res.Results[0].Text != "2" {
				t.Fatalf("%s first run: %+v %v", lang, res, err)
			}
			for j := 0; j < 10; j++ {
				t0 := time.Now()
				if _, err := d.c.RunCode(ctx, "it-interp-lat", api.RunCodeRequest{Code: "1+1", Context: cc.ID}, nil); err != nil {
					t.Fatal(err)
				}
				laters = append(laters, time.Since(t0))
			}
			if i < 4 {
				if err := d.c.DeleteCodeContext(ctx, "it-interp-lat", cc.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		sort.Slice(creates, func(i, j int) bool { return creates[i] < creates[j] })
		t.Logf("%s: create context + first runCode p50 %s", lang, creates[len(creates)/2].Round(time.Microsecond))
		sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
		sort.Slice(laters, func(i, j int) bool { return laters[i] < laters[j] })
		t.Logf("%s: first runCode on a fresh context p50 %s; later runCode(1+1) p50 %s", lang,
			firsts[len(firsts)/2].Round(time.Microsecond), laters[len(laters)/2].Round(time.Microsecond))
	}
	r := run(t, "it-interp-lat", "ps -eo rss=,args= | grep -E '^ *[0-9]+ (python3 -u -c|/usr/bin/python3 -m ipykernel_launcher|node -e)' | awk '{print $1, $2, $3, $4}'")
	t.Logf("idle context RSS (KiB, interpreter):\n%s", r.Stdout)
}

// TestBaseImagePython: the base image has a `python` command (Debian's
// python-is-python3) and the IPython kernel python contexts run.
func TestBaseImagePython(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "it-base-python"})
	r := run(t, "it-base-python", "python --version && python -c 'import ipykernel, jupyter_client; print(\"kernel ok\")'")
	if r.ExitCode != 0 || !strings.HasPrefix(r.Stdout, "Python 3.") || !strings.Contains(r.Stdout, "kernel ok") {
		t.Fatalf("python in the base image: exit %d, stdout %q, stderr %q", r.ExitCode, r.Stdout, r.Stderr)
	}
}
