package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// decodeJSON reads one JSON value from body into v, strictly: at most limit
// bytes, no unknown fields, nothing after the value. An empty body is an
// error unless optional. Every failure is an InvalidArgument (or a 413
// errTooLarge) whose message says what was wrong, because the reader is
// often an AI agent that will fix its request from the message alone.
func decodeJSON(body io.Reader, v any, optional bool) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) && optional {
			return nil
		}
		return jsonError(err)
	}
	// A second value, or garbage, after the first is a malformed request
	// rather than something to ignore: it usually means two requests were
	// concatenated or the body was corrupted.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errTooLarge{mbe}
		}
		return errdefs.InvalidArgument("request body has data after the JSON object")
	}
	return nil
}

func jsonError(err error) error {
	var (
		mbe    *http.MaxBytesError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return errTooLarge{mbe}
	case errors.Is(err, io.EOF):
		return errdefs.InvalidArgument("request body is empty: a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errdefs.InvalidArgument("request body is truncated JSON")
	case errors.As(err, &syntax):
		return errdefs.InvalidArgument("request body is malformed JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field != "" {
			return errdefs.InvalidArgument("field %q: expected a JSON %s, got %s", typ.Field, jsonKind(typ.Type.String()), typ.Value)
		}
		return errdefs.InvalidArgument("request body must be a JSON object, got %s", typ.Value)
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return errdefs.InvalidArgument("invalid request body: %s", msg)
}

// jsonKind names a Go type the way a JSON author thinks of it.
func jsonKind(goType string) string {
	switch {
	case goType == "string":
		return "string"
	case goType == "bool" || goType == "*bool":
		return "boolean"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "*api."), strings.HasPrefix(goType, "api."):
		return "object"
	case strings.HasPrefix(goType, "[]uint8"):
		return "base64 string"
	case strings.HasPrefix(goType, "[]"):
		return "array"
	case strings.Contains(goType, "int"), strings.Contains(goType, "float"):
		return "number"
	}
	return goType
}

// readJSON decodes r's body under the server's JSON cap.
func (s *server) readJSON(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	return decodeJSON(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes), v, optional)
}

// parseCreate is the whole create-request path (decode, apply the name from
// the URL if any, validate), separate so that it can be fuzzed
// (FuzzDecodeCreate). body must already be size-limited.
func parseCreate(body io.Reader, pathName string, optional bool) (api.CreateSandboxRequest, error) {
	var req api.CreateSandboxRequest
	if err := decodeJSON(body, &req, optional); err != nil {
		return req, err
	}
	if pathName != "" {
		req.Name = pathName // the URL names the resource; it wins over the body
	}
	return req, validateCreate(&req)
}

func queryBool(r *http.Request, key string) (bool, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errdefs.InvalidArgument("query parameter %s: want true or false, got %q", key, v)
	}
	return b, nil
}

// queryPath returns the required ?path= of a files route.
func queryPath(r *http.Request) (string, error) {
	q := r.URL.Query()
	if !q.Has("path") {
		return "", errdefs.InvalidArgument("query parameter path is required")
	}
	p := q.Get("path")
	if err := validatePath("path", p); err != nil {
		return "", err
	}
	return p, nil
}

func queryMode(r *http.Request, def uint32) (uint32, error) {
	v := r.URL.Query().Get("mode")
	if v == "" {
		return def, nil
	}
	m, err := strconv.ParseUint(v, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, errdefs.InvalidArgument("query parameter mode: want octal permission bits such as 0644, got %q", v)
	}
	return uint32(m), nil
}

// parseLabels turns ?label=k=v&label=k2=v2 into a map.
func parseLabels(vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	if len(vals) > maxLabels {
		return nil, errdefs.InvalidArgument("too many label filters (%d, max %d)", len(vals), maxLabels)
	}
	m := make(map[string]string, len(vals))
	for _, kv := range vals {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, errdefs.InvalidArgument("query parameter label: want key=value, got %q", kv)
		}
		m[k] = v
	}
	if err := validateLabels(m); err != nil {
		return nil, fmt.Errorf("query parameter label: %w", err)
	}
	return m, nil
}
