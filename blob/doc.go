// Package blob defines berth's object store for snapshots, backups and (in
// a cluster) the images nodes share. The local-directory implementation
// (fs) is the single-host default; s3 talks to any S3-compatible service
// (AWS S3, R2, MinIO, versitygw). Both pass the conformance suite in
// blobtest.
package blob
