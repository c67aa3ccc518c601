package network

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"path/filepath"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Config says where sandboxes are wired. Zero fields take the defaults noted.
type Config struct {
	Bridge   string       // "berth0"
	Subnet   netip.Prefix // 10.88.0.0/16; gateway = first address, on the bridge
	NetNSDir string       // where named netns are bind-mounted; /run/berth/netns
	Table    string       // nftables table name (inet and bridge family); "berth"

	// HostTCPPorts are TCP ports on the gateway address that sandboxes may
	// connect to (for a host-side egress proxy). Empty by default: a sandbox
	// reaches no host service at all.
	HostTCPPorts []uint16
	// HostUDPPorts are the same for UDP.
	HostUDPPorts []uint16

	// ProxyPort, when set, redirects every TCP connection a sandbox opens
	// (to any destination) to this port on the gateway address, where the
	// egress proxy reads the original destination (SO_ORIGINAL_DST).
	// DNSPort likewise catches every DNS query (UDP and TCP port 53) for
	// berth's resolver. Both are added to the host ports above.
	ProxyPort uint16
	DNSPort   uint16
}

// Attachment is what a runtime needs to put a sandbox on the network.
type Attachment struct {
	NetNSPath string     // join this netns (OCI linux.namespaces path)
	IP        netip.Addr // the sandbox's address on eth0
	Gateway   netip.Addr // its default route
	HostVeth  string     // host-side interface name
	Internet  bool       // whether traffic may leave for public addresses
}

const (
	defaultBridge   = "berth0"
	defaultNetNSDir = "/run/berth/netns"
	defaultTable    = "berth"

	// vethPrefix starts every host-side veth name; the rest is a hash so the
	// name fits IFNAMSIZ (15 chars) whatever the id length.
	vethPrefix = "bv"
	// sandboxIf is the interface name inside each sandbox netns.
	sandboxIf = "eth0"
	maxIDLen  = 128
)

var defaultSubnet = netip.MustParsePrefix("10.88.0.0/16")

func (c Config) withDefaults() (Config, error) {
	if c.Bridge == "" {
		c.Bridge = defaultBridge
	}
	if !c.Subnet.IsValid() {
		c.Subnet = defaultSubnet
	}
	if c.NetNSDir == "" {
		c.NetNSDir = defaultNetNSDir
	}
	if c.Table == "" {
		c.Table = defaultTable
	}
	c.Subnet = c.Subnet.Masked()
	if c.ProxyPort != 0 {
		c.HostTCPPorts = append(c.HostTCPPorts, c.ProxyPort)
	}
	if c.DNSPort != 0 {
		c.HostTCPPorts = append(c.HostTCPPorts, c.DNSPort)
		c.HostUDPPorts = append(c.HostUDPPorts, c.DNSPort)
	}
	if len(c.Bridge) > 15 || !validName(c.Bridge, 15) {
		return c, errdefs.InvalidArgument("bridge name %q must be 1-15 characters of [A-Za-z0-9_.-]", c.Bridge)
	}
	if !validName(c.Table, 64) {
		return c, errdefs.InvalidArgument("nftables table name %q must be 1-64 characters of [A-Za-z0-9_.-]", c.Table)
	}
	if !c.Subnet.Addr().Is4() || c.Subnet.Bits() < 8 || c.Subnet.Bits() > 30 {
		return c, errdefs.InvalidArgument("subnet %s must be IPv4 with a prefix length between /8 and /30", c.Subnet)
	}
	if !filepath.IsAbs(c.NetNSDir) {
		return c, errdefs.InvalidArgument("netns dir %q must be an absolute path", c.NetNSDir)
	}
	c.NetNSDir = filepath.Clean(c.NetNSDir)
	return c, nil
}

// validName accepts [A-Za-z0-9][A-Za-z0-9_.-]* up to max bytes. Sandbox ids
// become file names under NetNSDir and parts of interface aliases, so "..",
// "/", NUL and control characters must never get through (a "../x" id would
// bind-mount a netns over an arbitrary host file).
func validName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

func validateID(id string) error {
	if !validName(id, maxIDLen) {
		return errdefs.InvalidArgument("sandbox id %q must be 1-%d characters of [A-Za-z0-9_.-], starting with a letter or digit", id, maxIDLen)
	}
	return nil
}

// HostVethName is the host-side veth of sandbox id on bridge (the usage
// sampler reads its counters).
func HostVethName(bridge, id string) string { return hostVethName(bridge, id) }

// hostVethName derives the host-side interface name from the bridge and the
// id. The bridge is part of the hash so two managers on one host (a test and
// a running daemon) never fight over the same name for the same id.
func hostVethName(bridge, id string) string {
	sum := sha256.Sum256([]byte(bridge + "\x00" + id))
	return vethPrefix + hex.EncodeToString(sum[:])[:13]
}

// vethAlias is written to the host veth's ifalias so Cleanup can tell which
// manager and sandbox an interface belongs to without reversing the hash.
func vethAlias(bridge, id string) string { return aliasPrefix(bridge) + id }

func aliasPrefix(bridge string) string { return "berth:" + bridge + ":" }

// Gateway is the address the bridge holds in subnet (its first host
// address): sandboxes' default route, and where host-side services for
// sandboxes (the egress proxy and resolver) listen.
func Gateway(subnet netip.Prefix) netip.Addr { return subnet.Masked().Addr().Next() }
