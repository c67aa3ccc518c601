// Package s3test connects tests to the real S3-compatible server that
// scripts/s3-server.sh runs (versitygw): the settings it exports, a direct
// client for checking what is really in the bucket, bucket setup and
// cleanup, and FaultProxy, which injects 503s, an outage and corrupted
// bodies between a client and that server. Tests skip when the server's
// settings are not in the environment; scripts/test.sh always sets them.
package s3test
