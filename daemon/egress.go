package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/berth-sh/berth/egress"
	"github.com/berth-sh/berth/network"
)

// startEgress starts the egress proxy and resolver on the bridge address.
func startEgress(ctx context.Context, cfg Config, subnet netip.Prefix, secret func(context.Context, string) (string, bool, error), meter egress.Meter, logf func(string, ...any)) (*egress.Manager, error) {
	var open []netip.Prefix
	for _, s := range cfg.Egress.OpenPrivate {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("--egress-open-private %q: %w", s, err)
		}
		open = append(open, p.Masked())
	}
	upstream := cfg.Egress.Upstream
	if upstream == "" {
		if ns := hostDNS(); len(ns) > 0 {
			upstream = net.JoinHostPort(ns[0], "53")
		}
	} else if _, _, err := net.SplitHostPort(upstream); err != nil {
		upstream = net.JoinHostPort(upstream, "53")
	}
	var roots *x509.CertPool
	if cfg.Egress.UpstreamCA != "" {
		pemData, err := os.ReadFile(cfg.Egress.UpstreamCA)
		if err != nil {
			return nil, fmt.Errorf("--egress-upstream-ca: %w", err)
		}
		if roots, err = x509.SystemCertPool(); err != nil || roots == nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pemData) {
			return nil, fmt.Errorf("--egress-upstream-ca %s: no PEM certificates", cfg.Egress.UpstreamCA)
		}
	}
	m, err := egress.New(egress.Config{
		Gateway: network.Gateway(subnet), ProxyPort: cfg.Egress.ProxyPort, DNSPort: cfg.Egress.DNSPort,
		Subnet: subnet, OpenPrivate: open, Upstream: upstream,
		CADir: filepath.Join(cfg.DataDir, "egress"), LogDir: filepath.Join(cfg.DataDir, "egress", "logs"),
		UpstreamRoots: roots, Secret: secret, Logf: logf, Meter: meter,
	})
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	if err := m.Start(ctx); err != nil {
		return nil, err
	}
	logf("egress proxy on %s:%d, resolver on %s:%d (upstream %s)", network.Gateway(subnet), cfg.Egress.ProxyPort, network.Gateway(subnet), cfg.Egress.DNSPort, upstream)
	return m, nil
}
