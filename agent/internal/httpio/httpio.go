package httpio

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// MaxSmallBody bounds a JSON request body that carries no file or stdin
// bytes.
const MaxSmallBody = 64 << 10

// WriteTimeout bounds one write of a streamed answer to a host that stopped
// reading.
const WriteTimeout = 60 * time.Second

// WriteJSON answers with v as JSON and the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		WriteError(w, fmt.Errorf("encode response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(data)
}

// WriteError answers with err as an api.Error, with the status of its kind.
func WriteError(w http.ResponseWriter, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		err = errdefs.InvalidArgument("request body exceeds %d bytes", tooBig.Limit)
	}
	WriteJSON(w, api.HTTPStatus(err), api.WireErrorBody(err)) // the host is the reader: keep no_space
}

// DecodeJSON reads a bounded JSON request body into v. The body must be
// valid UTF-8: encoding/json would silently turn invalid bytes into U+FFFD,
// so a path like "/tmp/\xff" would name a different file than was asked for.
func DecodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return err
		}
		return errdefs.InvalidArgument("reading request body: %w", err)
	}
	if !utf8.Valid(data) {
		return errdefs.InvalidArgument("request body is not valid UTF-8")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return errdefs.InvalidArgument("invalid JSON request body: %w", err)
	}
	return nil
}
