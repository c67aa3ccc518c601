package e2b

import (
	"encoding/json"

	"github.com/berth-sh/berth/api"
)

// resultFields is one NDJSON "result" line: the MIME representations with
// the field names of E2B's interpreter, plus data (a DataFrame's columns)
// and chart (a matplotlib figure's typed chart). MIME types without a
// field of their own are keys of the line itself, as E2B sends them (the
// SDK gathers unknown keys into Result.extra).
func resultFields(res *api.CodeResult) map[string]any {
	m := make(map[string]any, len(res.Extra)+4)
	for k, v := range res.Extra {
		m[k] = v
	}
	m["type"], m["is_main_result"] = "result", res.IsMainResult
	set := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	set("text", res.Text)
	set("html", res.HTML)
	set("markdown", res.Markdown)
	set("svg", res.SVG)
	set("png", res.PNG)
	set("jpeg", res.JPEG)
	set("pdf", res.PDF)
	set("latex", res.LaTeX)
	set("javascript", res.JavaScript)
	for k, v := range map[string]json.RawMessage{"json": res.JSON, "data": res.Data, "chart": res.Chart} {
		if len(v) > 0 {
			m[k] = v
		}
	}
	return m
}
