package server

import (
	"net/http"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
)

// The cluster's nodes (GET /v1/nodes, drain, undrain) are the operator's:
// a tenant's key (from the operator policy) learns nothing of the
// machines and cannot stop placements on them, so it gets 403 before the
// membership is read.

// nodesFor returns the membership the caller may see, or why not.
func (s *server) nodesFor(r *http.Request) (control.Nodes, error) {
	if t := policy.TenantFrom(r.Context()); t != "" {
		return nil, errdefs.PermissionDenied("the cluster's nodes are the operator's: tenant %q's key cannot read or drain them", t)
	}
	if s.opts.Nodes == nil {
		return nil, errdefs.FailedPrecondition("this berth keeps no node membership")
	}
	return s.opts.Nodes, nil
}

func pathNode(r *http.Request) (string, error) {
	name := r.PathValue("node")
	return name, api.ValidateNodeName(name)
}

func (s *server) listNodes(w http.ResponseWriter, r *http.Request) error {
	nodes, err := s.nodesFor(r)
	if err != nil {
		return err
	}
	list, err := nodes.ListNodes(r.Context())
	if err != nil {
		return err
	}
	if list.Nodes == nil {
		list.Nodes = []api.Node{}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *server) getNode(w http.ResponseWriter, r *http.Request) error {
	nodes, err := s.nodesFor(r)
	if err != nil {
		return err
	}
	name, err := pathNode(r)
	if err != nil {
		return err
	}
	n, err := nodes.GetNode(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, n)
	return nil
}

func (s *server) drainNode(w http.ResponseWriter, r *http.Request) error {
	return s.setDraining(w, r, true)
}

func (s *server) undrainNode(w http.ResponseWriter, r *http.Request) error {
	return s.setDraining(w, r, false)
}

// setDraining answers drain and undrain with the node as it is now; both
// are idempotent (draining a draining node changes nothing).
func (s *server) setDraining(w http.ResponseWriter, r *http.Request, draining bool) error {
	nodes, err := s.nodesFor(r)
	if err != nil {
		return err
	}
	name, err := pathNode(r)
	if err != nil {
		return err
	}
	// The body is optional and carries nothing; a present one must be a
	// JSON object with no fields, so a typo'd option is not ignored.
	if err := s.readJSON(w, r, &struct{}{}, true); err != nil {
		return err
	}
	n, err := nodes.SetNodeDraining(r.Context(), name, draining)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, n)
	return nil
}

// listPools is GET /v1/pools: this node's warm pools, the operator's
// (like the nodes: a tenant learns nothing of the machines).
func (s *server) listPools(w http.ResponseWriter, r *http.Request) error {
	if t := policy.TenantFrom(r.Context()); t != "" {
		return errdefs.PermissionDenied("the warm pools are the operator's: tenant %q's key cannot read them", t)
	}
	list := api.PoolList{Pools: []api.Pool{}}
	if s.opts.Pools != nil {
		list.Pools = append(list.Pools, s.opts.Pools()...)
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}
