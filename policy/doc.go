// Package policy is the operator's policy: an allowlist of images (names
// pinned to digests) and, per API key or tenant, the instance types and
// custom-size bounds it may use, how many sandboxes and how much vCPU and
// memory it may run at once, whether it may have internet and which
// egress rules it may name.
//
// The policy is a YAML file (berth serve --policy FILE; check one with
// berth policy check FILE). The sandbox controller asks Admit before every
// start, so everything that starts compute — the HTTP API, durable
// objects' ctx.Container, forks — passes the same check. Refusals are
// errdefs permission-denied (not allowed at all) or resource-exhausted
// (allowed, but over a quota).
//
// The node (node/local) asks it through an interface of its own
// (local.Policy, which *Policy satisfies), and the tenant in a context and
// the admission request are package internal/tenant's (WithTenant,
// TenantFrom, Request and Usage here are its), so the node imports nothing
// of this package.
package policy
