// Command probe runs inside a test container and prints a JSON verdict on
// stdout. Built statically (CGO_ENABLED=0) by the runtime package's tests.
package main
