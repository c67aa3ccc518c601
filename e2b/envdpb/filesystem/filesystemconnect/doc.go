// Package filesystemconnect holds the connect-go client and handler interfaces of
// envd's filesystem service, generated with protoc-gen-connect-go from
// e2b/proto/filesystem/. Do not edit the generated file.
package filesystemconnect
