// Package blobtest is the conformance suite every blob.Store must pass.
// The fs and s3 stores run the same Run; a store-specific test file only
// adds what cannot be expressed through the interface (crash debris, full
// disks, unreachable servers).
package blobtest
