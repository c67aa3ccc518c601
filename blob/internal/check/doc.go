// Package check holds the two rules every blob store enforces the same way:
// which keys are acceptable, and that content read back hashes to the
// digest recorded when it was written.
//
// Keys reach the stores from API callers (snapshot and backup names), so
// the key rules are the line that keeps a name from escaping the store:
// "..", absolute paths and NUL bytes are the classic path-traversal probes
// (CWE-22, the Zip-Slip family), and a restricted character set also keeps
// keys identical on a POSIX directory and in S3.
package check
