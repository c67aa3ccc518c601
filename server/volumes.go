package server

import (
	"context"
	"net/http"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Volumes is the node's volume store (package volume) as the API uses it.
// Volumes are scoped to the caller's tenant (from the context).
type Volumes interface {
	Create(ctx context.Context, name string, sizeBytes int64) (api.Volume, error)
	Get(ctx context.Context, name string) (api.Volume, error)
	List(ctx context.Context) ([]api.Volume, error)
	Remove(ctx context.Context, name string) error
	Snapshot(ctx context.Context, src, name string) (api.Volume, error)
	Fork(ctx context.Context, src, name string, sizeBytes int64) (api.Volume, error)
}

func (s *server) volumes() (Volumes, error) {
	if s.opts.Volumes == nil {
		return nil, errdefs.FailedPrecondition("volumes are not enabled on this server")
	}
	return s.opts.Volumes, nil
}

func pathVolume(r *http.Request) (string, error) {
	name := r.PathValue("volume")
	return name, api.ValidateVolumeName(name)
}

func (s *server) createVolume(w http.ResponseWriter, r *http.Request) error {
	vs, err := s.volumes()
	if err != nil {
		return err
	}
	var req api.CreateVolumeRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := api.ValidateVolumeName(req.Name); err != nil {
		return err
	}
	if err := api.ValidateVolumeSize(req.SizeBytes); err != nil {
		return err
	}
	v, err := vs.Create(r.Context(), req.Name, req.SizeBytes)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, v)
	return nil
}

func (s *server) listVolumes(w http.ResponseWriter, r *http.Request) error {
	vs, err := s.volumes()
	if err != nil {
		return err
	}
	list, err := vs.List(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []api.Volume{}
	}
	writeJSON(w, http.StatusOK, api.VolumeList{Volumes: list})
	return nil
}

func (s *server) getVolume(w http.ResponseWriter, r *http.Request) error {
	vs, err := s.volumes()
	if err != nil {
		return err
	}
	name, err := pathVolume(r)
	if err != nil {
		return err
	}
	v, err := vs.Get(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *server) deleteVolume(w http.ResponseWriter, r *http.Request) error {
	vs, err := s.volumes()
	if err != nil {
		return err
	}
	name, err := pathVolume(r)
	if err != nil {
		return err
	}
	if err := vs.Remove(r.Context(), name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) snapshotVolume(w http.ResponseWriter, r *http.Request) error {
	vs, err := s.volumes()
	if err != nil {
		return err
	}
	src, err := pathVolume(r)
	if err != nil {
		return err
	}
	var req api.VolumeSnapshotRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := api.ValidateVolumeName(req.Name); err != nil {
		return err
	}
	v, err := vs.Snapshot(r.Context(), src, req.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, v)
	return nil
}

func (s *server) forkVolume(w http.ResponseWriter, r *http.Request) error {
	vs, err := s.volumes()
	if err != nil {
		return err
	}
	src, err := pathVolume(r)
	if err != nil {
		return err
	}
	var req api.VolumeForkRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := api.ValidateVolumeName(req.Name); err != nil {
		return err
	}
	if err := api.ValidateVolumeSize(req.SizeBytes); err != nil {
		return err
	}
	v, err := vs.Fork(r.Context(), src, req.Name, req.SizeBytes)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, v)
	return nil
}
