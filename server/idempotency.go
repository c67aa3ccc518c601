package server

import (
	"net/http"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// keyRule is a mutating route's answer to an Idempotency-Key. Exactly one
// of op and reject is set: op names the route's calls in the journal
// (every call is recorded; a keyed one is replayed, journal.go), reject
// says why a request that carries a key is refused. No mutating route
// ignores a key: TestEveryMutatingRouteDecidesIdempotency walks the route
// table.
type keyRule struct {
	op     string
	reject string
	// redactBody: the whole body is a secret, so the journal keeps none
	// of it (the field names of such a body say nothing of its values).
	redactBody bool
	// streamFromBody: the route has no {name}; the sandbox it belongs to
	// is the body's "name" (or "sandbox") field.
	streamFromBody bool
}

// Why the routes below refuse a key.
const (
	rejectUpload = "the body is a stream of any size, which the journal cannot keep or compare; " +
		"sending the same content again has the same effect, so retry without the key"
	rejectWait = "a wait changes nothing and a retry should wait again, not replay an earlier answer; retry without the key"
)

// keyRules holds every mutating route (POST, PUT, PATCH, DELETE) of
// routes. docs/CONTROLLERS.md ("Idempotency and the journal") lists the
// same decisions for readers.
var keyRules = map[string]keyRule{
	// Lifecycle.
	"POST /v1/sandboxes":              {op: "create", streamFromBody: true},
	"PUT /v1/sandboxes/{name}":        {op: "get-or-create"},
	"DELETE /v1/sandboxes/{name}":     {op: "destroy"},
	"POST /v1/sandboxes/{name}/sleep": {op: "sleep"},
	"POST /v1/sandboxes/{name}/exec":  {op: "exec"},
	// Files.
	"PUT /v1/sandboxes/{name}/files/content": {reject: rejectUpload},
	"DELETE /v1/sandboxes/{name}/files":      {op: "remove-file"},
	"POST /v1/sandboxes/{name}/files/mkdir":  {op: "mkdir"},
	"POST /v1/sandboxes/{name}/files/rename": {op: "rename"},
	// Images.
	"POST /v1/images/pull":       {op: "pull-image"},
	"POST /v1/images/push":       {op: "push-image"},
	"POST /v1/images/import":     {reject: rejectUpload},
	"POST /v1/images/builds":     {reject: rejectUpload},
	"POST /v1/images/build-base": {op: "build-base"},
	"DELETE /v1/images/{ref...}": {op: "remove-image"},
	// Snapshots, fork, backups.
	"POST /v1/sandboxes/{name}/snapshots": {op: "snapshot"},
	"DELETE /v1/snapshots/{id}":           {op: "delete-snapshot"},
	"POST /v1/sandboxes/{name}/fork":      {op: "fork"},
	"POST /v1/sandboxes/{name}/backups":   {op: "backup"},
	"DELETE /v1/backups/{id}":             {op: "delete-backup"},
	"POST /v1/backups/{id}/restore":       {op: "restore-backup", streamFromBody: true},
	// Ports.
	"POST /v1/sandboxes/{name}/ports":          {op: "expose-port"},
	"DELETE /v1/sandboxes/{name}/ports/{port}": {op: "unexpose-port"},
	// Dev loop.
	"POST /v1/sandboxes/{name}/processes":                {op: "start-process"},
	"DELETE /v1/sandboxes/{name}/processes":              {op: "kill-all-processes"},
	"DELETE /v1/sandboxes/{name}/processes/{id}":         {op: "kill-process"},
	"POST /v1/sandboxes/{name}/processes/{id}/wait-log":  {reject: rejectWait},
	"POST /v1/sandboxes/{name}/processes/{id}/wait-port": {reject: rejectWait},
	"POST /v1/sandboxes/{name}/processes/{id}/wait-exit": {reject: rejectWait},
	"POST /v1/sandboxes/{name}/sessions":                 {op: "create-session"},
	"DELETE /v1/sandboxes/{name}/sessions/{id}":          {op: "delete-session"},
	"PATCH /v1/sandboxes/{name}/sessions/{id}":           {op: "update-session"},
	"POST /v1/sandboxes/{name}/sessions/{id}/exec":       {op: "session-exec"},
	"POST /v1/sandboxes/{name}/git/checkout":             {op: "git-checkout"},
	"POST /v1/sandboxes/{name}/terminals":                {op: "create-terminal"},
	"DELETE /v1/sandboxes/{name}/terminals/{id}":         {op: "delete-terminal"},
	// Code contexts.
	"POST /v1/sandboxes/{name}/code/contexts":              {op: "create-code-context"},
	"DELETE /v1/sandboxes/{name}/code/contexts/{id}":       {op: "delete-code-context"},
	"POST /v1/sandboxes/{name}/code/contexts/{id}/restart": {op: "restart-code-context"},
	"POST /v1/sandboxes/{name}/code/run":                   {op: "run-code"},
	// Egress.
	"PUT /v1/sandboxes/{name}/network": {op: "set-network"},
	"PUT /v1/secrets/{secret}":         {op: "set-secret", redactBody: true},
	"DELETE /v1/secrets/{secret}":      {op: "delete-secret"},
	// Durable objects.
	"POST /v1/objects/{class}/{id}/{method}": {op: "rpc"},
	// Nodes: drain and undrain set a flag, so a replay answers what the
	// first call did (the node as it was then).
	"POST /v1/nodes/{node}/drain":   {op: "drain-node"},
	"POST /v1/nodes/{node}/undrain": {op: "undrain-node"},
	// Volumes (journaled in the empty stream, as images are).
	"POST /v1/volumes":                   {op: "create-volume"},
	"DELETE /v1/volumes/{volume}":        {op: "delete-volume"},
	"POST /v1/volumes/{volume}/snapshot": {op: "snapshot-volume"},
	"POST /v1/volumes/{volume}/fork":     {op: "fork-volume"},
}

// mutating reports whether a method changes state: the methods keyRules
// must cover.
func mutating(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// withKeyRule wraps a route's handler with its rule: journaled (and
// replayable) when the server keeps a journal, refused with a key when
// the rule says so. Without a journal (tests, embedders) a key on an
// honoured route has nothing to be replayed from and goes unused.
func withKeyRule(pattern string, rule keyRule, journal bool, h handlerFunc) handlerFunc {
	switch {
	case rule.reject != "":
		return func(s *server, w http.ResponseWriter, r *http.Request) error {
			if r.Header.Get(api.IdempotencyKeyHeader) != "" {
				return errdefs.InvalidArgument("%s is not supported on %s: %s", api.IdempotencyKeyHeader, pattern, rule.reject)
			}
			return h(s, w, r)
		}
	case rule.op != "" && journal:
		return func(s *server, w http.ResponseWriter, r *http.Request) error {
			return s.journaled(w, r, pattern, rule, h)
		}
	}
	return h
}
