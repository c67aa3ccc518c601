package api

import (
	"encoding/json"
	"time"
)

// Code interpreter languages.
const (
	LangPython     = "python"
	LangJavaScript = "javascript"
	LangTypeScript = "typescript"
	LangBash       = "bash"
)

// CreateCodeContextRequest creates a code context: one long-lived
// interpreter process inside the sandbox whose state persists across runs.
type CreateCodeContextRequest struct {
	Language string `json:"language"` // python (default), javascript, typescript
	Cwd      string `json:"cwd,omitempty"`
	Env      Env    `json:"env,omitempty"` // null unsets (Env)
	// User runs the interpreter; default: the sandbox's default user
	// ("user"), "root" on request.
	User string `json:"user,omitempty"`
}

// CodeContext describes a code context.
type CodeContext struct {
	ID        string    `json:"id"`
	Language  string    `json:"language"`
	Cwd       string    `json:"cwd"`
	User      string    `json:"user"`
	CreatedAt time.Time `json:"createdAt"`
}

// CodeContextList is the answer of a context listing.
type CodeContextList struct {
	Contexts []CodeContext `json:"contexts"`
}

// RunCodeRequest runs code in a context (Context set) or in the default
// context of Language (python when both are empty).
type RunCodeRequest struct {
	Code      string `json:"code"`
	Context   string `json:"context,omitempty"`
	Language  string `json:"language,omitempty"`
	TimeoutMs int64  `json:"timeoutMs,omitempty"` // interrupt after; 0: none
	Env       Env    `json:"env,omitempty"`       // for this run only; null unsets
}

// CodeResult is one rich output: the same value in every format the
// interpreter could render it in (IPython's MIME bundle). Binary formats
// (png, jpeg) are base64. IsMainResult marks the value of the last
// expression; display() calls and captured figures are not main results.
// Data is a pandas DataFrame's columns ({column: [values]}), Chart the
// typed chart of a matplotlib figure (E2B's chart shape), Extra the MIME
// types without a field of their own.
type CodeResult struct {
	Text         string                     `json:"text,omitempty"`
	HTML         string                     `json:"html,omitempty"`
	Markdown     string                     `json:"markdown,omitempty"`
	SVG          string                     `json:"svg,omitempty"`
	PNG          string                     `json:"png,omitempty"`
	JPEG         string                     `json:"jpeg,omitempty"`
	JSON         json.RawMessage            `json:"json,omitempty"`
	LaTeX        string                     `json:"latex,omitempty"`
	JavaScript   string                     `json:"javascript,omitempty"`
	PDF          string                     `json:"pdf,omitempty"`
	Data         json.RawMessage            `json:"data,omitempty"`
	Chart        json.RawMessage            `json:"chart,omitempty"`
	Extra        map[string]json.RawMessage `json:"extra,omitempty"`
	IsMainResult bool                       `json:"isMainResult"`
}

// CodeError is an exception raised by the code (or an interrupt).
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// Code event types.
const (
	CodeEventStdout   = "stdout"
	CodeEventStderr   = "stderr"
	CodeEventResult   = "result"
	CodeEventError    = "error"
	CodeEventComplete = "complete"
)

// CodeEvent is one event of a code run, in the order it happened. A run
// ends with exactly one complete event (or, if the sandbox failed, a
// transport error).
type CodeEvent struct {
	Type           string      `json:"type"`
	Text           string      `json:"text,omitempty"`   // stdout, stderr
	Result         *CodeResult `json:"result,omitempty"` // result
	Error          *CodeError  `json:"error,omitempty"`  // error
	ExecutionCount int         `json:"executionCount,omitempty"`
	Context        string      `json:"context,omitempty"` // complete: the context the code ran in
}

// CodeLogs is the output of a run, one entry per stream chunk.
type CodeLogs struct {
	Stdout []string `json:"stdout"`
	Stderr []string `json:"stderr"`
}

// CodeRunResult is the buffered answer of a run: every event plus the
// E2B-shaped summary (results, logs, error, executionCount) derived from
// them.
type CodeRunResult struct {
	Context        string       `json:"context"`
	Results        []CodeResult `json:"results"`
	Logs           CodeLogs     `json:"logs"`
	Error          *CodeError   `json:"error,omitempty"`
	ExecutionCount int          `json:"executionCount"`
	Events         []CodeEvent  `json:"events"`
}

// Add folds one event into r.
func (r *CodeRunResult) Add(ev CodeEvent) {
	r.Events = append(r.Events, ev)
	switch ev.Type {
	case CodeEventStdout:
		r.Logs.Stdout = append(r.Logs.Stdout, ev.Text)
	case CodeEventStderr:
		r.Logs.Stderr = append(r.Logs.Stderr, ev.Text)
	case CodeEventResult:
		if ev.Result != nil {
			r.Results = append(r.Results, *ev.Result)
		}
	case CodeEventError:
		r.Error = ev.Error
	case CodeEventComplete:
		r.ExecutionCount = ev.ExecutionCount
		if ev.Context != "" {
			r.Context = ev.Context
		}
	}
}
