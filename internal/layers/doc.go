// Package layers checks that berth's imports flow one way: from the
// commands down through the daemon wiring, the API faces, the control
// plane, the node and its machinery to the leaves. The table is
// docs/layers.txt; this package parses it and judges an import graph
// against it, and its test runs that over `go list` of the module.
package layers
