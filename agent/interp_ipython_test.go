package agent_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestInterpPythonIPython: a python context is IPython: indented cells,
// shell escapes, magics, display(), str results as the string itself.
func TestInterpPythonIPython(t *testing.T) {
	_, c := newPyClient(t)
	cc := newContext(t, c, "python")
	res := runCode(t, c, cc.ID, "    a = 1\n    b = 2\n    a + b", 0)
	if res.Error != nil || mainText(res) != "3" {
		t.Fatalf("indented cell: %+v", res)
	}
	res = runCode(t, c, cc.ID, "!pwd", 0)
	if res.Error != nil || strings.TrimSpace(strings.Join(res.Logs.Stdout, "")) != cc.Cwd {
		t.Fatalf("!pwd: %+v (cwd %q)", res, cc.Cwd)
	}
	res = runCode(t, c, cc.ID, "%pwd", 0)
	if res.Error != nil || mainText(res) != cc.Cwd {
		t.Fatalf("%%pwd: %+v", res)
	}
	res = runCode(t, c, cc.ID, "files = !echo one; echo two\nlen(files)", 0)
	if res.Error != nil || mainText(res) != "2" {
		t.Fatalf("captured shell escape: %+v", res)
	}
	res = runCode(t, c, cc.ID, "'hello'", 0)
	if res.Error != nil || mainText(res) != "hello" {
		t.Fatalf("str result: %q, want hello without quotes", mainText(res))
	}
	res = runCode(t, c, cc.ID, "['x', 'y']", 0)
	if mainText(res) != "['x', 'y']" {
		t.Fatalf("list of str: %q", mainText(res))
	}
	res = runCode(t, c, cc.ID, "from IPython.display import display, HTML, Markdown, SVG, JSON\n"+
		"display(HTML('<i>h</i>'))\ndisplay(Markdown('**m**'))\ndisplay(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"/>'))\n"+
		"display(JSON({'k': [1]}))\n"+
		"class X:\n    def _repr_mimebundle_(self, include=None, exclude=None):\n        return {'text/plain': 'x', 'application/vnd.custom': 'c'}\ndisplay(X())", 0)
	if res.Error != nil || len(res.Results) != 5 {
		t.Fatalf("display: %+v", res)
	}
	r := res.Results
	if r[0].HTML != "<i>h</i>" || r[1].Markdown != "**m**" || !strings.Contains(r[2].SVG, "<svg") || string(r[3].JSON) != `{"k":[1]}` && string(r[3].JSON) != `{"k": [1]}` {
		t.Fatalf("display results: %+v", r)
	}
	if r[0].IsMainResult || string(r[4].Extra["application/vnd.custom"]) != `"c"` || r[4].Text != "x" {
		t.Fatalf("display extra: %+v", r[4])
	}
	// The run's count is IPython's execution count; setup cells do not count.
	if res.ExecutionCount != 7 {
		t.Fatalf("execution count %d, want 7", res.ExecutionCount)
	}
}

// TestInterpPythonDataFrameData: a DataFrame result carries its columns
// as data ({column: [values]}), besides text and html.
func TestInterpPythonDataFrameData(t *testing.T) {
	_, c := newPyClient(t, "pandas")
	cc := newContext(t, c, "python")
	res := runCode(t, c, cc.ID, "import pandas as pd\npd.DataFrame({'name': ['a', 'b'], 'n': [1, 2], 'f': [0.5, float('nan')]})", 0)
	if res.Error != nil || len(res.Results) != 1 {
		t.Fatalf("DataFrame: %+v", res)
	}
	var data map[string][]any
	if err := json.Unmarshal(res.Results[0].Data, &data); err != nil {
		t.Fatalf("data %q: %v", res.Results[0].Data, err)
	}
	if len(data) != 3 || data["name"][1] != "b" || data["n"][1] != 2.0 || data["f"][0] != 0.5 || data["f"][1] != nil {
		t.Fatalf("data %v", data)
	}
	if !strings.Contains(res.Results[0].HTML, "<table") {
		t.Fatalf("html: %q", res.Results[0].HTML)
	}
}

type chartT struct {
	Type     string            `json:"type"`
	Title    *string           `json:"title"`
	XLabel   *string           `json:"x_label"`
	YLabel   *string           `json:"y_label"`
	XUnit    *string           `json:"x_unit"`
	XScale   string            `json:"x_scale"`
	Elements []json.RawMessage `json:"elements"`
}

func chartOf(t *testing.T, c interface{}, raw json.RawMessage) chartT {
	t.Helper()
	var ch chartT
	if err := json.Unmarshal(raw, &ch); err != nil {
		t.Fatalf("chart %q: %v", raw, err)
	}
	return ch
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// TestInterpPythonCharts: a matplotlib figure's result carries E2B's typed
// chart for line, scatter, bar, pie, box-and-whisker and several axes.
func TestInterpPythonCharts(t *testing.T) {
	_, c := newPyClient(t, "matplotlib")
	cc := newContext(t, c, "python")
	runCode(t, c, cc.ID, "import matplotlib.pyplot as plt", 0)
	chart := func(code string) (chartT, json.RawMessage) {
		t.Helper()
		res := runCode(t, c, cc.ID, code+"\nplt.show()", 0)
		if res.Error != nil || len(res.Results) != 1 || res.Results[0].PNG == "" || len(res.Results[0].Chart) == 0 {
			t.Fatalf("%s: %+v", code, res)
		}
		return chartOf(t, c, res.Results[0].Chart), res.Results[0].Chart
	}

	ch, raw := chart("plt.plot([1, 2, 3], [1, 4, 9], label='sq')\nplt.title('Squares')\nplt.xlabel('time (s)')\nplt.ylabel('v')")
	var line struct {
		Label  string       `json:"label"`
		Points [][2]float64 `json:"points"`
	}
	if ch.Type != "line" || str(ch.Title) != "Squares" || str(ch.XLabel) != "time (s)" || str(ch.XUnit) != "s" || ch.XScale != "linear" ||
		len(ch.Elements) != 1 || json.Unmarshal(ch.Elements[0], &line) != nil || line.Label != "sq" || len(line.Points) != 3 || line.Points[2] != [2]float64{3, 9} {
		t.Fatalf("line chart: %s", raw)
	}

	ch, raw = chart("plt.scatter([1, 2], [3, 4], label='pts')")
	if ch.Type != "scatter" || len(ch.Elements) != 1 || json.Unmarshal(ch.Elements[0], &line) != nil || line.Label != "pts" || line.Points[1] != [2]float64{2, 4} {
		t.Fatalf("scatter chart: %s", raw)
	}

	ch, raw = chart("plt.bar(['a', 'b', 'c'], [3, 5, 7], label='sales')\nplt.ylabel('count')")
	var bars []struct {
		Label string  `json:"label"`
		Value float64 `json:"value"`
		Group string  `json:"group"`
	}
	json.Unmarshal(mustJSON(t, ch.Elements), &bars)
	if ch.Type != "bar" || len(bars) != 3 || bars[1].Label != "b" || bars[1].Value != 5 || bars[1].Group != "sales" || str(ch.YLabel) != "count" {
		t.Fatalf("bar chart: %s", raw)
	}

	ch, raw = chart("plt.pie([1, 3], labels=['x', 'y'])")
	var wedges []struct {
		Label  string  `json:"label"`
		Angle  float64 `json:"angle"`
		Radius float64 `json:"radius"`
	}
	json.Unmarshal(mustJSON(t, ch.Elements), &wedges)
	if ch.Type != "pie" || len(wedges) != 2 || wedges[0].Label != "x" || wedges[0].Angle != 90 || wedges[1].Angle != 270 || wedges[0].Radius != 1 {
		t.Fatalf("pie chart: %s", raw)
	}

	ch, raw = chart("plt.boxplot([[1, 2, 3, 4, 5, 40], [2, 3, 4]], labels=['p', 'q'])")
	var boxes []struct {
		Label    string    `json:"label"`
		Min      float64   `json:"min"`
		Q1       float64   `json:"first_quartile"`
		Median   float64   `json:"median"`
		Q3       float64   `json:"third_quartile"`
		Max      float64   `json:"max"`
		Outliers []float64 `json:"outliers"`
	}
	json.Unmarshal(mustJSON(t, ch.Elements), &boxes)
	if ch.Type != "box_and_whisker" || len(boxes) != 2 || boxes[0].Label != "p" || boxes[0].Median != 3.5 || boxes[0].Min != 1 ||
		boxes[0].Max != 5 || len(boxes[0].Outliers) != 1 || boxes[0].Outliers[0] != 40 || boxes[1].Q1 != 2.5 || boxes[1].Q3 != 3.5 {
		t.Fatalf("box chart: %s", raw)
	}

	ch, raw = chart("fig, (a1, a2) = plt.subplots(1, 2)\nfig.suptitle('Both')\na1.plot([1, 2], [2, 1])\na2.bar(['u'], [1])")
	var subs []chartT
	json.Unmarshal(mustJSON(t, ch.Elements), &subs)
	if ch.Type != "superchart" || str(ch.Title) != "Both" || len(subs) != 2 || subs[0].Type != "line" || subs[1].Type != "bar" {
		t.Fatalf("superchart: %s", raw)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
