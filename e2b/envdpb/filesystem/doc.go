// Package filesystem holds the protobuf messages of envd's filesystem service,
// generated with protoc-gen-go from e2b/proto/filesystem/ (see
// e2b/doc.go for how to regenerate). Do not edit the .pb.go files.
package filesystem
