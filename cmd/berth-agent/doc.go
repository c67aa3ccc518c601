// Command berth-agent is the program that runs as PID 1 inside every berth
// sandbox. It serves the agent API (package agent) on a unix socket in a
// directory the host bind-mounts into the sandbox, reaps every orphan the
// sandbox leaves behind, and on SIGTERM passes the signal on to the
// sandbox's processes before exiting.
//
// It is built static (CGO_ENABLED=0) so it runs in any image, even one with
// no libc:
//
//	CGO_ENABLED=0 go build -ldflags '-s -w -X main.Version=v1.2.3' -o bin/berth-agent ./cmd/berth-agent
package main
