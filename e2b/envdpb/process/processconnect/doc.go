// Package processconnect holds the connect-go client and handler interfaces of
// envd's process service, generated with protoc-gen-connect-go from
// e2b/proto/process/. Do not edit the generated file.
package processconnect
