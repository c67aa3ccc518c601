package e2b

import (
	"slices"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// networkBody is the E2B network config (create, detail, update). Fields
// berth does not act on are accepted only when they ask for nothing.
type networkBody struct {
	AllowOut            []string `json:"allowOut,omitempty"`
	DenyOut             []string `json:"denyOut,omitempty"`
	AllowPublicTraffic  *bool    `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost     *string  `json:"maskRequestHost,omitempty"`
	Rules               any      `json:"rules,omitempty"`
	EgressProxy         any      `json:"egressProxy,omitempty"`
	HTTPSPorts          []int    `json:"httpsPorts,omitempty"`
	AllowInternetAccess *bool    `json:"allow_internet_access,omitempty"`
}

// allTraffic is the CIDR E2B uses to mean "every destination".
const allTraffic = "0.0.0.0/0"

// egressFor maps E2B's allow_internet_access and network allowOut/denyOut
// onto berth's egress policy: internet on unless allow_internet_access is
// false or denyOut names 0.0.0.0/0; other denyOut entries are deny rules,
// allowOut entries allow rules (so "deny all but these" is internet off
// plus allows). The controller validates the entries (egress.Compile).
// Transforms, an egress proxy, HTTPS ports, host masking and private
// ingress are refused rather than silently ignored.
func egressFor(allowInternet *bool, n *networkBody) (api.NetworkPolicy, error) {
	p := api.NetworkPolicy{Internet: true, Allow: []string{}, Deny: []string{}}
	if allowInternet != nil {
		p.Internet = *allowInternet
	}
	if n == nil {
		return p, nil
	}
	if n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic {
		return p, errdefs.InvalidArgument("allowPublicTraffic: false is not supported by berth's E2B API yet (ports are reachable with the sandbox ID)")
	}
	if n.Rules != nil || n.EgressProxy != nil || len(n.HTTPSPorts) > 0 || n.MaskRequestHost != nil {
		return p, errdefs.InvalidArgument("network rules, egressProxy, httpsPorts and maskRequestHost are not supported by berth's E2B API yet")
	}
	for _, d := range n.DenyOut {
		if d == allTraffic {
			p.Internet = false
			continue
		}
		p.Deny = append(p.Deny, d)
	}
	p.Allow = append(p.Allow, n.AllowOut...)
	return p, nil
}

// networkOf is the E2B view of a sandbox's egress policy.
func networkOf(sb api.Sandbox) (bool, *networkBody) {
	p := api.NetworkPolicy{Internet: sb.Internet}
	if sb.Network != nil {
		p = *sb.Network
	}
	n := &networkBody{AllowOut: slices.Clone(p.Allow), DenyOut: slices.Clone(p.Deny)}
	if !p.Internet {
		n.DenyOut = append(n.DenyOut, allTraffic)
	}
	return p.Internet, n
}
