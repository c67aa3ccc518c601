// Package egress turns a sandbox's network policy into enforcement on the
// host: a transparent proxy for the TCP that sandboxes send out, a DNS
// resolver on the sandbox bridge, credential injection into HTTPS
// requests, and a per-sandbox audit log of every decision.
//
// The network package redirects every TCP connection a sandbox opens to
// the proxy (nftables, prerouting) and every DNS query to the resolver, so
// nothing a sandbox does (its /etc/hosts, a bare IP, its own resolver)
// reaches the outside without passing here.
//
//   - HTTP (port 80) is matched by its Host header, HTTPS (443) by the SNI
//     of its ClientHello, other TCP by address and port.
//   - The proxy never connects to the address the sandbox dialled unless the
//     resolver returned it for the name being matched (pinning, so
//     /etc/hosts and SNI tricks lead nowhere); otherwise it resolves the name
//     itself.
//   - Every address the proxy connects to and every A record the resolver
//     hands out passes Blocklist: the host's own addresses, the sandbox
//     subnet, loopback, link-local (metadata), multicast, private, CGNAT and
//     unique-local ranges and their IPv6 and IPv4-mapped forms are refused
//     whatever the policy says (DNS rebinding ends here). Only the operator
//     can open a private range.
//   - For hosts with injection rules the proxy terminates TLS with a
//     per-deployment CA (CA), adds the configured headers with secret values
//     the sandbox never sees, and re-originates TLS to the real host,
//     verifying its certificate. Other HTTPS is tunnelled undecrypted.
//
// One job: decide and carry egress. Where sandboxes live (netns, bridge,
// nft rules) is the network package's; who a sandbox is and what its
// policy says is the controller's, which calls Attach, SetPolicy and Detach.
package egress
