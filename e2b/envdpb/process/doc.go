// Package process holds the protobuf messages of envd's process service,
// generated with protoc-gen-go from e2b/proto/process/ (see
// e2b/doc.go for how to regenerate). Do not edit the .pb.go files.
package process
