package server

import (
	"net/http"
	"strconv"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func (s *server) exposePort(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.ExposePortRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	p, err := s.b.ExposePort(r.Context(), name, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, p)
	return nil
}

func (s *server) listPorts(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	list, err := s.b.ListPorts(r.Context(), name)
	if err != nil {
		return err
	}
	if list == nil {
		list = []api.ExposedPort{}
	}
	writeJSON(w, http.StatusOK, api.ExposedPortList{Ports: list})
	return nil
}

func (s *server) unexposePort(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	ps := r.PathValue("port")
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != ps {
		return errdefs.InvalidArgument("port %q must be a number from 1 to 65535", ps)
	}
	if err := s.b.UnexposePort(r.Context(), name, port); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
