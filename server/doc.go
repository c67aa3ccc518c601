// Package server is berth's HTTP face: it turns the REST/SSE API described in
// api/openapi.yaml into calls on a Backend (the controller) and nothing else.
//
// Its one job is to be a strict, boring edge. Every request is authenticated
// (except GET /v1/health), every JSON body is size-capped, decoded with unknown
// fields rejected and validated before the backend sees it, and every error
// leaves as an api.Error with the status chosen by api.HTTPStatus. Streams
// (exec output, image progress) are server-sent events that end with exactly
// one terminal event, so a client can always tell a finished command from a
// lost connection. File and image uploads are streamed to the backend without
// buffering.
package server
