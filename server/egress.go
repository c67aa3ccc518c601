package server

import (
	"net/http"
	"strconv"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/internal/errdefs"
)

func (s *server) egress() (control.Egress, error) {
	e, ok := s.b.(control.Egress)
	if !ok {
		return nil, errdefs.FailedPrecondition("this server has no egress control")
	}
	return e, nil
}

func (s *server) getNetwork(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	e, err := s.egress()
	if err != nil {
		return err
	}
	p, err := e.GetNetwork(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

func (s *server) setNetwork(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	e, err := s.egress()
	if err != nil {
		return err
	}
	var p api.NetworkPolicy
	if err := s.readJSON(w, r, &p, false); err != nil {
		return err
	}
	out, err := e.SetNetwork(r.Context(), name, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) egressLog(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	e, err := s.egress()
	if err != nil {
		return err
	}
	limit := 0
	if v := r.URL.Query().Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 0 {
			return errdefs.InvalidArgument("limit %q must be a non-negative number", v)
		}
	}
	evs, err := e.EgressLog(r.Context(), name, limit)
	if err != nil {
		return err
	}
	if evs == nil {
		evs = []api.EgressEvent{}
	}
	writeJSON(w, http.StatusOK, api.EgressLog{Events: evs})
	return nil
}

func (s *server) setSecret(w http.ResponseWriter, r *http.Request) error {
	e, err := s.egress()
	if err != nil {
		return err
	}
	var req api.SetSecretRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := e.SetSecret(r.Context(), r.PathValue("secret"), req.Value); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) listSecrets(w http.ResponseWriter, r *http.Request) error {
	e, err := s.egress()
	if err != nil {
		return err
	}
	list, err := e.ListSecrets(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []api.Secret{}
	}
	writeJSON(w, http.StatusOK, api.SecretList{Secrets: list})
	return nil
}

func (s *server) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	e, err := s.egress()
	if err != nil {
		return err
	}
	if err := e.DeleteSecret(r.Context(), r.PathValue("secret")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
