// Package fspath is how the agent's services treat a path a request names:
// which paths no file API accepts, how a relative one resolves against a
// home, how a filesystem error becomes an errdefs kind that names the path
// the user gave, and which names are the agent's own staging files.
//
// It runs inside the sandbox, so symlinks are left to the kernel, which
// resolves them inside the sandbox's root.
package fspath
