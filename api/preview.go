package api

import "time"

// ExposePortRequest is the body of POST /v1/sandboxes/{name}/ports. Port is
// a TCP port inside the sandbox (1-65535); the service may listen on
// 127.0.0.1 only. Private URLs require "Authorization: Bearer <API key>".
//
// Token, when set, is the URL's token instead of a random one (8 to 32
// characters from [a-z0-9]), so the URL is stable: exposing the port
// again with the same token, in a later run, gives the same URL.
type ExposePortRequest struct {
	Port    int    `json:"port"`
	Name    string `json:"name,omitempty"`
	Private bool   `json:"private,omitempty"`
	Token   string `json:"token,omitempty"`
}

// Preview URL statuses. A URL is active in the run of the sandbox it was
// made in; after the sandbox restarts it is stale (410, and it never wakes
// the sandbox) until the port is exposed again.
const (
	PortActive = "active"
	PortStale  = "stale"
)

// ExposedPort is one exposed port and its preview URLs. URL routes by host
// name ({port}-{sandbox}-{token}.{public host}) and needs wildcard DNS
// (*.localhost resolves to loopback in browsers and curl); PathURL works
// for clients that cannot use wildcard names.
type ExposedPort struct {
	Port      int       `json:"port"`
	Name      string    `json:"name,omitempty"`
	URL       string    `json:"url"`
	PathURL   string    `json:"pathUrl"`
	Private   bool      `json:"private"`
	Status    string    `json:"status"` // PortActive or PortStale
	CreatedAt time.Time `json:"createdAt"`
}

// ExposedPortList is the body of GET /v1/sandboxes/{name}/ports.
type ExposedPortList struct {
	Ports []ExposedPort `json:"ports"`
}
