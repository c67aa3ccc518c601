// Command kubeschema turns the Kubernetes OpenAPI v2 document
// (api/openapi-spec/swagger.json of the k8s.io/kubernetes module, fetched
// pinned through the Go module proxy by scripts/deploy-check.sh) into the
// per-kind JSON schema files kubeconform reads with -schema-location.
//
// It exists because CI has no internet: kubeconform's usual schema source is
// a download, and no registry this project reaches serves those files. The
// OpenAPI document is the API server's own statement of its types, so
// schemas derived from it are as close to "what the cluster would accept" as
// validation without a cluster gets.
//
// Each kind gets one standalone file: the kind's schema with every type it
// reaches carried along under "definitions" (local $refs only, so recursive
// types such as JSONSchemaProps need no inlining and nothing is fetched).
// File names follow kubeconform's lookup: <kind>-<first label of the
// group>-<version>.json, <kind>-<version>.json for the core group, all lower
// case, in <out>/<version>-standalone[-strict]/.
//
// The strict variant closes every object that lists its properties
// (additionalProperties: false), which is what makes kubeconform -strict
// refuse a misspelt field. Two Kubernetes string formats get their real
// shape: int-or-string accepts an integer or a string, and a Quantity
// accepts a number or a string (YAML's "cpu: 1" is an integer). Any other
// format is dropped: the API server's formats (int32, byte, date-time) are
// not JSON Schema assertions kubeconform makes. A keyword the converter does
// not know fails the run rather than being dropped, so a newer spec cannot
// silently lose a constraint.
//
// Usage:
//
//	go run ./deploy/kubeschema -spec swagger.json -version v1.37.2 -out DIR
package main
