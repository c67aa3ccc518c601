package server

import (
	"net/http"
	"net/url"

	"github.com/berth-sh/berth/api"
)

// Snapshot, fork and backup routes. They are plain request/response even
// though they can take seconds: the answer is one small record, and the
// connection carries no bytes meanwhile (NewHTTPServer sets no write
// timeout). A client that goes away cancels the request's context, and with
// it the operation.

// pathID returns the validated {id} of the URL.
func pathID(r *http.Request, kind string) (string, error) {
	id := r.PathValue("id")
	return id, validateID(kind, id)
}

func (s *server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.SnapshotRequest
	if err := s.readJSON(w, r, &req, true); err != nil {
		return err
	}
	if err := validateSnapshotRequest(&req); err != nil {
		return err
	}
	snap, err := s.b.Snapshot(r.Context(), name, req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/snapshots/"+url.PathEscape(snap.ID))
	writeJSON(w, http.StatusCreated, snap)
	return nil
}

func (s *server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	sandbox, name := q.Get("sandbox"), q.Get("name")
	if sandbox != "" {
		if err := ValidateSandboxName(sandbox); err != nil {
			return err
		}
	}
	if name != "" {
		if err := validateSnapshotName(name); err != nil {
			return err
		}
	}
	list, err := s.b.ListSnapshots(r.Context(), sandbox, name)
	if err != nil {
		return err
	}
	if list == nil {
		list = []api.Snapshot{} // [] on the wire, never null
	}
	writeJSON(w, http.StatusOK, api.SnapshotList{Snapshots: list})
	return nil
}

func (s *server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "snapshot")
	if err != nil {
		return err
	}
	snap, err := s.b.GetSnapshot(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, snap)
	return nil
}

func (s *server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "snapshot")
	if err != nil {
		return err
	}
	if err := s.b.DeleteSnapshot(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) fork(w http.ResponseWriter, r *http.Request) error {
	source, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.ForkRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateFork(&req); err != nil {
		return err
	}
	res, err := s.b.Fork(r.Context(), source, req)
	if err != nil {
		return err
	}
	if res.Sandboxes == nil {
		res.Sandboxes = []api.Sandbox{}
	}
	writeJSON(w, http.StatusCreated, res)
	return nil
}

func (s *server) createBackup(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.BackupRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateBackup(&req); err != nil {
		return err
	}
	b, err := s.b.CreateBackup(r.Context(), name, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, b)
	return nil
}

func (s *server) listBackups(w http.ResponseWriter, r *http.Request) error {
	sandbox := r.URL.Query().Get("sandbox")
	if sandbox != "" {
		if err := ValidateSandboxName(sandbox); err != nil {
			return err
		}
	}
	list, err := s.b.ListBackups(r.Context(), sandbox)
	if err != nil {
		return err
	}
	if list == nil {
		list = []api.Backup{}
	}
	writeJSON(w, http.StatusOK, api.BackupList{Backups: list})
	return nil
}

func (s *server) deleteBackup(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "backup")
	if err != nil {
		return err
	}
	if err := s.b.DeleteBackup(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) restoreBackup(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "backup")
	if err != nil {
		return err
	}
	var req api.RestoreBackupRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateRestore(&req); err != nil {
		return err
	}
	res, err := s.b.RestoreBackup(r.Context(), id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
