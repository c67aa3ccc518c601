package e2b

import (
	"net/http"
	"sort"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Fork and snapshots: E2B's fork, createSnapshot, listSnapshots and
// deleteSnapshot (DELETE /templates/{id}) over berth's snapshots.

func (h *Handler) fork(w http.ResponseWriter, r *http.Request, id string) error {
	var body struct {
		Timeout *int64 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	count := 1
	if body.Count != nil {
		count = *body.Count
	}
	if count < 1 || count > 100 {
		return errdefs.InvalidArgument("count must be between 1 and 100, got %d", count)
	}
	life, err := h.lifetime(body.Timeout)
	if err != nil {
		return err
	}
	if _, err := h.lookup(r.Context(), id); err != nil {
		return err
	}
	names := make([]string, count)
	for i := range names {
		names[i] = newID()
	}
	res, err := h.b.Fork(r.Context(), id, api.ForkRequest{Count: count, Names: names})
	if err != nil {
		return err
	}
	type item struct {
		Sandbox *sandboxBody `json:"sandbox,omitempty"`
		Error   *apiError    `json:"error,omitempty"`
	}
	out := make([]item, len(res.Sandboxes))
	end := time.Now().Add(life).UTC().Format(time.RFC3339Nano)
	for i, sb := range res.Sandboxes {
		sb, err := h.b.SetLabels(r.Context(), sb.Name, map[string]string{labelEnd: end})
		if err != nil {
			st := statusOf(err)
			out[i].Error = &apiError{Code: st, Message: err.Error()}
			continue
		}
		b := h.sandboxBody(sb)
		out[i].Sandbox = &b
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotOf(sn api.Snapshot) snapshotInfo {
	si := snapshotInfo{SnapshotID: sn.ID, Names: []string{}}
	if sn.Name != "" {
		si.Names = append(si.Names, sn.Name)
	}
	return si
}

func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request, id string) error {
	var body struct {
		Name string `json:"name"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if _, err := h.lookup(r.Context(), id); err != nil {
		return err
	}
	sn, err := h.b.Snapshot(r.Context(), id, api.SnapshotRequest{Name: body.Name})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, snapshotOf(sn))
	return nil
}

func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	sbID := q.Get("sandboxID")
	sns, err := h.b.ListSnapshots(r.Context(), sbID, q.Get("name"))
	if err != nil {
		return err
	}
	sort.Slice(sns, func(i, j int) bool { return sns[i].CreatedAt.After(sns[j].CreatedAt) })
	out := []snapshotInfo{}
	for _, sn := range sns {
		if validID(sn.Sandbox) {
			out = append(out, snapshotOf(sn))
		}
	}
	page, next, err := paginate(out, q.Get("limit"), q.Get("nextToken"))
	if err != nil {
		return err
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

func (h *Handler) deleteSnapshot(w http.ResponseWriter, r *http.Request, id string) error {
	if _, ok := h.opts.Templates[id]; ok {
		return errdefs.PermissionDenied("template %q is configured on the server and cannot be deleted through the API", id)
	}
	if err := h.b.DeleteSnapshot(r.Context(), id); err != nil {
		if errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			return errdefs.NotFound("snapshot %q not found", id)
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
