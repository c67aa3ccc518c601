// Package network gives each sandbox its own network namespace, wired to a
// berth bridge through a veth pair, and enforces who it may talk to.
//
// One job: turn "sandbox id X, internet on/off" into a named netns that a
// runtime can join (NetNSPath), and keep the host's packet filter in step.
// Everything is done from Go through netlink (vishvananda/netlink, netns) and
// nf_tables (google/nftables); nothing on the hot path forks ip, nft or
// iptables.
//
// Isolation is layered, so one mistake does not open a hole:
//
//   - L2: every host-side veth is a bridge port with the "isolated" flag, so
//     the kernel never bridges a frame from one sandbox straight to another.
//   - L3 (inet table, input hook): from the bridge only replies to
//     connections the host opened are accepted; a sandbox cannot reach any
//     host service, including ones bound to the gateway address or to the
//     host's other addresses (checklist #26, CVE-2020-15257 class).
//   - L3 (inet table, forward hook): bridge-to-bridge (routed
//     inter-sandbox) is dropped; private, link-local, loopback, CGNAT,
//     multicast and reserved ranges, plus the host's directly attached
//     networks ("never" set), are dropped even when internet is on
//     (checklist #24, cloud metadata 169.254.169.254);
//     everything else is forwarded only for sandboxes in the "internet" set,
//     and masqueraded on the way out. Nothing may open a connection into a
//     sandbox from outside.
//   - Anti-spoofing (bridge table, prerouting): a frame entering from a
//     sandbox port must carry that sandbox's IPv4 address as its source (IP
//     and ARP), and only IPv4 and ARP are bridged at all (checklist #27).
//   - IPv6 is disabled inside each sandbox netns, so no rule set has to be
//     written twice.
//
// The netns files under Config.NetNSDir are the durable truth: New rebuilds
// its address allocation and nft sets from them, so a daemon restart never
// hands out an address that a living sandbox still has.
package network
