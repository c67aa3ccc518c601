// Package integration holds berth's end-to-end tests. They start a real
// `berth serve` (runc, namespaces, cgroups, overlayfs, btrfs quotas,
// nftables) as a child process and drive it through the Go SDK, exactly as
// a user would. They need root and are built only with -tags integration;
// scripts/test.sh runs them.
package integration
