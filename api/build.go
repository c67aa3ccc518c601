package api

// BuildRequest is an image build from a Dockerfile (POST /v1/images/builds;
// the body is the build context as a tar stream, these fields are query
// parameters: name, dockerfile, target, noCache, buildArg=K=V repeated,
// instance, and network as the JSON of a NetworkPolicy).
type BuildRequest struct {
	// Name is the result's name[:tag]; empty leaves it unnamed (by digest).
	Name string `json:"name,omitempty"`
	// Dockerfile is its path inside the context; default "Dockerfile".
	Dockerfile string `json:"dockerfile,omitempty"`
	// Target is the stage to build; default the last one.
	Target    string            `json:"target,omitempty"`
	BuildArgs map[string]string `json:"buildArgs,omitempty"`
	// NoCache reruns every step.
	NoCache bool `json:"noCache,omitempty"`
	// Instance sizes the sandbox each RUN step executes in; default the
	// builder's ("standard-1").
	Instance string `json:"instance,omitempty"`
	// Network is the egress policy of every RUN step (default: no
	// internet). Secrets reach a step only through its Inject rules.
	Network *NetworkPolicy `json:"network,omitempty"`
}
