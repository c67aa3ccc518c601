// Package s3 is the cluster blob store: any S3-compatible service (AWS S3,
// R2, MinIO, versitygw), through minio-go.
//
// Object layout in the bucket, under Config.Prefix:
//
//	<key>.blob~      the blob; user metadata x-amz-meta-berth-sha256
//	~tmp/<id>        large uploads before their digest is known
//
// The ".blob~" suffix exists because S3 servers backed by a filesystem
// (versitygw, MinIO) cannot hold both an object "a" and an object "a/b";
// "~" is outside the key alphabet, so no object name is a prefix-directory
// of another and every server behaves like AWS.
//
// Making a blob visible only when complete, with its sha256 attached:
//
//   - Small blobs (up to PartSize) are buffered, hashed, and sent in one
//     PUT carrying the digest: S3 PUTs are atomic.
//   - Large blobs with a wanted digest go straight to the final name as a
//     multipart upload created with that digest in its metadata. Nothing
//     is visible until CompleteMultipartUpload, which is only sent after
//     the streamed content hashed to the wanted digest; otherwise the
//     upload is aborted.
//   - Large blobs without a wanted digest are uploaded (multipart) to a
//     temp name, then server-side copied to the final name with the now
//     known digest, and the temp object is deleted. The copy is atomic on
//     the final name. New sweeps temp objects and incomplete uploads older
//     than Config.TempMaxAge left by crashed writers.
//
// S3 "additional checksums" were not used: for multipart uploads their
// SHA-256 is a checksum of part checksums, not of the content, so it cannot
// be compared with a digest recorded elsewhere (snapshot metadata).
//
// Every Get re-hashes the content as it streams and fails the final Read
// if it differs from the recorded digest. Requests are retried by minio-go
// with capped exponential backoff on 5xx, throttling and network errors,
// bounded by Config.MaxRetries; connection failures surface as
// errdefs.Unavailable.
package s3
