package e2b

import (
	"encoding/json"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestResultFieldsDataChartExtra: a result line carries data, chart and
// pdf under E2B's names, and other MIME types as keys of the line itself
// (the SDK collects those into Result.extra), never over type or
// is_main_result.
func TestResultFieldsDataChartExtra(t *testing.T) {
	res := &api.CodeResult{Text: "t", PDF: "cGRm", Data: json.RawMessage(`{"a":[1]}`), Chart: json.RawMessage(`{"type":"line"}`),
		Extra: map[string]json.RawMessage{"application/vnd.x": json.RawMessage(`"x"`), "type": json.RawMessage(`"bad"`)}, IsMainResult: true}
	b, err := json.Marshal(resultFields(res))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got["type"] != "result" || got["is_main_result"] != true || got["text"] != "t" || got["pdf"] != "cGRm" ||
		got["application/vnd.x"] != "x" || got["chart"].(map[string]any)["type"] != "line" || got["data"].(map[string]any)["a"].([]any)[0] != 1.0 {
		t.Fatalf("result line %s", b)
	}
	if _, ok := got["html"]; ok {
		t.Fatalf("empty fields are omitted: %s", b)
	}
}
