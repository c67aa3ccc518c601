package api

import "time"

// NetworkPolicy is a sandbox's egress policy. The controller owns it: it is
// set at create and replaced at runtime (PUT /v1/sandboxes/{name}/network)
// without a restart. Rules are evaluated deny first, then allow, then
// Internet; some destinations (the host, other sandboxes, loopback,
// link-local and metadata, private ranges) are blocked whatever it says.
type NetworkPolicy struct {
	// Internet lets traffic that no rule names leave the sandbox. With
	// false, only what Allow (or an Inject host) names gets out.
	Internet bool `json:"internet"`
	// Allow and Deny entries are host patterns ("api.github.com",
	// "*.example.com"), IPs or CIDRs ("203.0.113.0/24"), each optionally
	// with a port ("api.github.com:443", "203.0.113.7:22",
	// "[2001:db8::/32]:443"). Host patterns match HTTP by its Host header
	// and HTTPS by its TLS SNI, and other TCP ("git.example.com:22") by the
	// addresses berth's resolver returned to the sandbox for the name; IPs
	// and CIDRs match any TCP connection.
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// Inject rules add headers to HTTPS requests for a host; their hosts
	// are allowed implicitly (unless denied). Header values may name
	// secrets as ${secret:NAME}; the sandbox never sees the values.
	Inject []InjectRule `json:"inject,omitempty"`
}

// InjectRule sets headers on every HTTPS request to Host (an exact name or
// a "*.example.com" pattern). The egress proxy terminates TLS for such
// hosts with the deployment's egress CA, which sandboxes trust.
type InjectRule struct {
	Host       string            `json:"host"`
	SetHeaders map[string]string `json:"setHeaders"`
}

// Secret describes a stored secret. Its value is write-only: no API call
// ever returns it.
type Secret struct {
	Name      string    `json:"name"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// SecretList is the body of GET /v1/secrets.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}

// SetSecretRequest is the body of PUT /v1/secrets/{name}.
type SetSecretRequest struct {
	Value string `json:"value"`
}

// Egress event kinds.
const (
	EgressHTTP  = "http"  // plain HTTP, matched by Host
	EgressTLS   = "tls"   // HTTPS tunnelled by SNI, not decrypted
	EgressHTTPS = "https" // HTTPS terminated by the proxy (injection)
	EgressTCP   = "tcp"   // other TCP, matched by address and port
	EgressDNS   = "dns"   // a lookup through berth's resolver
)

// EgressEvent is one egress decision in a sandbox's audit log. Bytes are
// counted when the connection ends (Out: sandbox → destination).
type EgressEvent struct {
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"`
	Host     string    `json:"host,omitempty"`
	IP       string    `json:"ip,omitempty"`
	Port     int       `json:"port,omitempty"`
	Allowed  bool      `json:"allowed"`
	Rule     string    `json:"rule"`             // the rule that decided: "allow:HOST", "deny:HOST", "internet", "default", "blocked:RANGE", ...
	Reason   string    `json:"reason,omitempty"` // extra detail on a refusal or failure
	Injected bool      `json:"injected,omitempty"`
	// Method, Path and Status describe one request of an intercepted
	// (https) connection; such connections log one event per request
	// and one for the connection.
	Method   string `json:"method,omitempty"`
	Path     string `json:"path,omitempty"`
	Status   int    `json:"status,omitempty"`
	BytesOut int64  `json:"bytesOut"`
	BytesIn  int64  `json:"bytesIn"`
}

// EgressLog is the body of GET /v1/sandboxes/{name}/egress/log.
type EgressLog struct {
	Events []EgressEvent `json:"events"`
}
