package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/internal/errdefs"
)

const maxControlBody = 1 << 20

// newSandboxBody is NewSandbox / NewSandboxV2 of the E2B API.
type newSandboxBody struct {
	TemplateID          string                  `json:"templateID"`
	Timeout             *int64                  `json:"timeout"`
	AutoPause           *bool                   `json:"autoPause"`
	AutoPauseMemory     *bool                   `json:"autoPauseMemory"`
	AutoResume          *struct{ Enabled bool } `json:"autoResume"`
	Secure              *bool                   `json:"secure"`
	AllowInternetAccess *bool                   `json:"allow_internet_access"`
	Network             *networkBody            `json:"network"`
	Metadata            map[string]string       `json:"metadata"`
	EnvVars             map[string]string       `json:"envVars"`
	Mcp                 json.RawMessage         `json:"mcp"`
	VolumeMounts        []volumeMountBody       `json:"volumeMounts"`
}

// volumeMountBody is E2B's volume mount: a named volume at a path. It maps
// onto a berth volume mount of the volume with that name (read-write;
// readOnly is berth's addition).
type volumeMountBody struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// sandboxBody is the E2B Sandbox schema (create, connect, fork).
type sandboxBody struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	Alias              string  `json:"alias,omitempty"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// detailBody is SandboxDetail (and, without the last fields, ListedSandbox).
type detailBody struct {
	TemplateID          string            `json:"templateID"`
	SandboxID           string            `json:"sandboxID"`
	ClientID            string            `json:"clientID"`
	Alias               string            `json:"alias,omitempty"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int64             `json:"memoryMB"`
	DiskSizeMB          int64             `json:"diskSizeMB"`
	State               string            `json:"state"`
	Metadata            map[string]string `json:"metadata"`
	EnvdVersion         string            `json:"envdVersion"`
	VolumeMounts        []volumeMountBody `json:"volumeMounts"`
	EnvdAccessToken     string            `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool             `json:"allowInternetAccess,omitempty"`
	Network             *networkBody      `json:"network,omitempty"`
	Lifecycle           *lifecycleBody    `json:"lifecycle,omitempty"`
	Domain              *string           `json:"domain"`
}

type lifecycleBody struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

func (h *Handler) serveControl(w http.ResponseWriter, r *http.Request) {
	if id, hash, ok := isTemplateUpload(r); ok {
		// A presigned upload link: its token, not the API key.
		if err := h.upload(w, r, id, hash); err != nil {
			writeErr(w, err)
		}
		return
	}
	r, ok := h.authorize(r)
	if !ok {
		writeJSON(w, http.StatusUnauthorized, apiError{Code: 401, Message: "Invalid API key: send the berth API key (<data>/api-key) in X-API-Key"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxControlBody)
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if parts[0] == "v2" {
		parts = parts[1:]
	}
	if h.opts.Forward != nil && parts[0] == "sandboxes" && len(parts) >= 2 && validID(parts[1]) {
		// Everything about one sandbox is its owner's to answer: the
		// process and watcher tables and the streams that kill and pause
		// end live there.
		out, err := h.opts.Forward.Sandbox(w, r, parts[1], forward.Route{Face: forward.API})
		if err != nil {
			writeErr(w, err)
			return
		}
		if out == forward.Proxied {
			return
		}
	}
	var err error
	switch {
	case parts[0] == "sandboxes" && len(parts) == 1 && r.Method == http.MethodPost:
		err = h.create(w, r)
	case parts[0] == "sandboxes" && len(parts) == 1 && r.Method == http.MethodGet:
		err = h.list(w, r)
	case parts[0] == "sandboxes" && len(parts) == 2 && r.Method == http.MethodGet:
		err = h.get(w, r, parts[1])
	case parts[0] == "sandboxes" && len(parts) == 2 && r.Method == http.MethodDelete:
		err = h.kill(w, r, parts[1])
	case parts[0] == "sandboxes" && len(parts) == 3 && r.Method == http.MethodPost:
		switch parts[2] {
		case "timeout", "refreshes":
			err = h.setTimeout(w, r, parts[1], parts[2] == "refreshes")
		case "pause":
			err = h.pause(w, r, parts[1])
		case "connect", "resume":
			err = h.connect(w, r, parts[1])
		case "fork":
			err = h.fork(w, r, parts[1])
		case "snapshots":
			err = h.createSnapshot(w, r, parts[1])
		default:
			err = unsupported(r)
		}
	case parts[0] == "sandboxes" && len(parts) == 3 && parts[2] == "metrics" && r.Method == http.MethodGet:
		err = h.metrics(w, r, parts[1])
	case parts[0] == "sandboxes" && len(parts) == 3 && parts[2] == "network" && r.Method == http.MethodPut:
		err = h.updateNetwork(w, r, parts[1])
	case parts[0] == "snapshots" && len(parts) == 1 && r.Method == http.MethodGet:
		err = h.listSnapshots(w, r)
	case parts[0] == "v3" && len(parts) == 2 && parts[1] == "templates" && r.Method == http.MethodPost:
		err = h.requestTemplate(w, r)
	case parts[0] == "templates" && len(parts) == 2 && parts[1] == "tags" && r.Method == http.MethodPost:
		err = h.assignTags(w, r)
	case parts[0] == "templates" && len(parts) == 2 && parts[1] == "tags" && r.Method == http.MethodDelete:
		err = h.removeTags(w, r)
	case parts[0] == "templates" && len(parts) == 3 && parts[1] == "aliases" && r.Method == http.MethodGet:
		err = h.templateAlias(w, r, parts[2])
	case parts[0] == "templates" && len(parts) == 3 && parts[2] == "tags" && r.Method == http.MethodGet:
		err = h.templateTags(w, r, parts[1])
	case parts[0] == "templates" && len(parts) == 4 && parts[2] == "files" && r.Method == http.MethodGet:
		err = h.fileUploadLink(w, r, parts[1], parts[3])
	case parts[0] == "templates" && len(parts) == 4 && parts[2] == "builds" && r.Method == http.MethodPost:
		err = h.startBuild(w, r, parts[1], parts[3])
	case parts[0] == "templates" && len(parts) == 5 && parts[2] == "builds" && parts[4] == "status" && r.Method == http.MethodGet:
		err = h.buildStatus(w, r, parts[1], parts[3])
	case parts[0] == "templates" && len(parts) == 2 && r.Method == http.MethodDelete:
		var found bool
		if found, err = h.deleteTemplate(r.Context(), parts[1]); err == nil {
			if found {
				w.WriteHeader(http.StatusNoContent)
			} else {
				err = h.deleteSnapshot(w, r, parts[1])
			}
		}
	default:
		err = unsupported(r)
	}
	if err != nil {
		if st := statusOf(err); st >= 500 {
			h.opts.Logf("e2b %s %s: %v", r.Method, r.URL.Path, err)
		}
		writeErr(w, err)
	}
}

// unsupported is the answer for E2B routes berth does not serve (template
// builds, volumes, secrets, …): a clear 404, never a hang.
func unsupported(r *http.Request) error {
	return errdefs.NotFound("%s %s is not supported by berth's E2B API", r.Method, r.URL.Path)
}

func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errdefs.InvalidArgument("request body is larger than %d bytes", mbe.Limit)
		}
		return errdefs.InvalidArgument("read body: %w", err)
	}
	// Readable again: a create placed on another node is forwarded with it.
	r.Body = io.NopCloser(bytes.NewReader(b))
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errdefs.InvalidArgument("invalid JSON body: %w", err)
	}
	return nil
}

func (h *Handler) lifetime(secs *int64) (time.Duration, error) {
	if secs == nil {
		return h.opts.DefaultTimeout, nil
	}
	if *secs < 0 {
		return 0, errdefs.InvalidArgument("timeout must not be negative")
	}
	d := time.Duration(*secs) * time.Second
	if *secs == 0 || d > h.opts.MaxTimeout {
		d = h.opts.MaxTimeout
	}
	return d, nil
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) error {
	var body newSandboxBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if m := strings.TrimSpace(string(body.Mcp)); m != "" && m != "null" {
		return errdefs.InvalidArgument("mcp is not supported by berth's E2B API")
	}
	life, err := h.lifetime(body.Timeout)
	if err != nil {
		return err
	}
	policy, err := egressFor(body.AllowInternetAccess, body.Network)
	if err != nil {
		return err
	}
	if body.TemplateID == "" {
		body.TemplateID = "base"
	}
	req := api.CreateSandboxRequest{Name: newID(), Env: body.EnvVars, Network: &policy, KeepAlive: ptr(true)}
	for _, vm := range body.VolumeMounts {
		req.Volumes = append(req.Volumes, api.VolumeMount{Name: vm.Name, Path: vm.Path, ReadOnly: vm.ReadOnly})
	}
	if err := api.ValidateVolumeMounts(req.Volumes); err != nil {
		return err
	}
	if err := h.resolveTemplate(r.Context(), body.TemplateID, &req); err != nil {
		return err
	}
	labels, err := metadataLabels(body.Metadata)
	if err != nil {
		return err
	}
	labels[labelManaged] = "1"
	labels[labelTemplate] = body.TemplateID
	labels[labelEnd] = time.Now().Add(life).UTC().Format(time.RFC3339Nano)
	labels[labelTimeout] = strconv.FormatInt(int64(life/time.Second), 10)
	if body.AutoPause != nil && *body.AutoPause {
		labels[labelOnTimeout] = "pause"
	}
	if body.AutoResume != nil && body.AutoResume.Enabled {
		labels[labelAutoResume] = "true"
	}
	req.Labels = labels
	if h.opts.Forward != nil {
		// decodeBody left the body readable again for this.
		out, err := h.opts.Forward.Create(w, r, req, forward.Route{Face: forward.API})
		if err != nil || out == forward.Proxied {
			return err
		}
	}
	sb, _, err := h.b.GetOrCreate(r.Context(), req, true)
	if err != nil {
		// A sandbox that failed to start is not left behind half-made.
		if sb.Name != "" {
			_ = h.b.Destroy(context.WithoutCancel(r.Context()), sb.Name)
		}
		return err
	}
	writeJSON(w, http.StatusCreated, h.sandboxBody(sb))
	return nil
}

func ptr[T any](v T) *T { return &v }

// resolveTemplate sets req's image or snapshot from an E2B template ID: a
// configured template name, else a berth snapshot ID or name.
func (h *Handler) resolveTemplate(ctx context.Context, tpl string, req *api.CreateSandboxRequest) error {
	if img, ok := h.opts.Templates[tpl]; ok {
		req.Image = img
		return nil
	}
	if ok, err := h.resolveBuiltTemplate(ctx, tpl, req); ok || err != nil {
		return err
	}
	if sn, err := h.b.GetSnapshot(ctx, tpl); err == nil {
		req.Snapshot = sn.ID
		return nil
	}
	if sns, err := h.b.ListSnapshots(ctx, "", tpl); err == nil && len(sns) > 0 {
		sort.Slice(sns, func(i, j int) bool { return sns[i].CreatedAt.After(sns[j].CreatedAt) })
		req.Snapshot = sns[0].ID
		return nil
	}
	return errdefs.NotFound("template %q not found: configure it in the E2B templates file, or use a snapshot ID", tpl)
}

func metadataLabels(md map[string]string) (map[string]string, error) {
	labels := map[string]string{}
	if len(md) > 32 {
		return nil, errdefs.InvalidArgument("%d metadata keys, max 32", len(md))
	}
	for k, v := range md {
		if k == "" || len(k) > 48 || !metaKeyOK(k) {
			return nil, errdefs.InvalidArgument("invalid metadata key %q: use up to 48 of A-Z a-z 0-9 . _ / -", k)
		}
		if len(v) > 256 || v == "" {
			return nil, errdefs.InvalidArgument("metadata value for %q must be 1-256 bytes", k)
		}
		labels[labelMetaPrefix+k] = v
	}
	return labels, nil
}

func metaKeyOK(k string) bool {
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._/-", c)) {
			return false
		}
	}
	return true
}

func metadataOf(sb api.Sandbox) map[string]string {
	md := map[string]string{}
	for k, v := range sb.Labels {
		if strings.HasPrefix(k, labelMetaPrefix) {
			md[strings.TrimPrefix(k, labelMetaPrefix)] = v
		}
	}
	return md
}

func (h *Handler) sandboxBody(sb api.Sandbox) sandboxBody {
	return sandboxBody{
		TemplateID: sb.Labels[labelTemplate], SandboxID: sb.Name, ClientID: "berth",
		EnvdVersion: EnvdVersion, EnvdAccessToken: h.accessToken(sb.Name),
	}
}

func stateOf(sb api.Sandbox) string {
	if sb.State == api.StateSleeping {
		return "paused"
	}
	return "running"
}

func endOf(sb api.Sandbox) time.Time {
	t, err := time.Parse(time.RFC3339Nano, sb.Labels[labelEnd])
	if err != nil {
		return sb.CreatedAt
	}
	return t
}

func (h *Handler) detail(sb api.Sandbox, full bool) detailBody {
	started := sb.CreatedAt
	if sb.StartedAt != nil {
		started = *sb.StartedAt
	}
	cpus := int(sb.Resources.VCPU + 0.999)
	if cpus < 1 {
		cpus = 1
	}
	d := detailBody{
		TemplateID: sb.Labels[labelTemplate], SandboxID: sb.Name, ClientID: "berth",
		StartedAt: started.UTC(), EndAt: endOf(sb).UTC(), CPUCount: cpus,
		MemoryMB: sb.Resources.MemoryMiB, DiskSizeMB: sb.Resources.DiskMB,
		State: stateOf(sb), Metadata: metadataOf(sb), EnvdVersion: EnvdVersion, VolumeMounts: []volumeMountBody{},
	}
	for _, vm := range sb.Volumes {
		d.VolumeMounts = append(d.VolumeMounts, volumeMountBody{Name: vm.Name, Path: vm.Path, ReadOnly: vm.ReadOnly})
	}
	if full {
		d.EnvdAccessToken = h.accessToken(sb.Name)
		internet, n := networkOf(sb)
		d.AllowInternetAccess, d.Network = ptr(internet), n
		onTimeout := sb.Labels[labelOnTimeout]
		if onTimeout == "" {
			onTimeout = "kill"
		}
		d.Lifecycle = &lifecycleBody{AutoResume: sb.Labels[labelAutoResume] == "true", OnTimeout: onTimeout}
	}
	return d
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, id string) error {
	sb, err := h.lookup(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.detail(sb, true))
	return nil
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := control.ListFilter{Labels: map[string]string{labelManaged: "1"}}
	if md := q.Get("metadata"); md != "" {
		vals, err := url.ParseQuery(md)
		if err != nil {
			return errdefs.InvalidArgument("metadata filter %q: %w", md, err)
		}
		for k, v := range vals {
			f.Labels[labelMetaPrefix+k] = v[0]
		}
	}
	sbs, err := h.b.List(r.Context(), f)
	if err != nil {
		return err
	}
	states := map[string]bool{}
	for _, s := range q["state"] {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				states[p] = true
			}
		}
	}
	var startedAfter time.Time
	if s := q.Get("startedAfter"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return errdefs.InvalidArgument("startedAfter %q: %w", s, err)
		}
		startedAfter = t
	}
	tpl := q.Get("template")
	out := []detailBody{}
	for _, sb := range sbs {
		d := h.detail(sb, false)
		if len(states) > 0 && !states[d.State] || tpl != "" && d.TemplateID != tpl || d.StartedAt.Before(startedAfter) {
			continue
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].StartedAt.Equal(out[j].StartedAt) {
			return out[i].StartedAt.Before(out[j].StartedAt)
		}
		return out[i].SandboxID < out[j].SandboxID
	})
	if q.Get("order") != "asc" {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
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

// paginate cuts items at an offset token; the token is the offset of the
// next page.
func paginate[T any](items []T, limitS, token string) ([]T, string, error) {
	limit := 100
	if limitS != "" {
		n, err := strconv.Atoi(limitS)
		if err != nil || n < 1 || n > 1000 {
			return nil, "", errdefs.InvalidArgument("limit must be 1-1000, got %q", limitS)
		}
		limit = n
	}
	off := 0
	if token != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(token, "o"))
		if err != nil || n < 0 || !strings.HasPrefix(token, "o") {
			return nil, "", errdefs.InvalidArgument("invalid nextToken %q", token)
		}
		off = n
	}
	if off > len(items) {
		off = len(items)
	}
	end := off + limit
	next := ""
	if end < len(items) {
		next = "o" + strconv.Itoa(end)
	} else {
		end = len(items)
	}
	return items[off:end], next, nil
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request, id string) error {
	if _, err := h.lookup(r.Context(), id); err != nil {
		return err
	}
	h.endStreams(id, errSandboxGone)
	if err := h.b.Destroy(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, id string, refresh bool) error {
	var body struct {
		Timeout  *int64 `json:"timeout"`
		Duration *int64 `json:"duration"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if refresh {
		body.Timeout = body.Duration
	}
	if body.Timeout == nil {
		return errdefs.InvalidArgument("timeout (seconds) is required")
	}
	life, err := h.lifetime(body.Timeout)
	if err != nil {
		return err
	}
	if _, err := h.lookup(r.Context(), id); err != nil {
		return err
	}
	if _, err := h.b.SetLabels(r.Context(), id, map[string]string{labelEnd: time.Now().Add(life).UTC().Format(time.RFC3339Nano)}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pause puts the sandbox to sleep in its sleep mode's tier: frozen (the
// operator default freeze: memory and processes stay, and this API keeps
// its process table so Connect and List find them after the thaw) or
// stopped (files only: running processes end). Open streams end either
// way. A paused sandbox answers 409.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request, id string) error {
	sb, err := h.lookup(r.Context(), id)
	if err != nil {
		return err
	}
	if sb.State == api.StateSleeping {
		return errdefs.FailedPrecondition("sandbox %s is already paused", id)
	}
	h.cancelStreams(id, errSandboxGone)
	if err := h.b.Sleep(r.Context(), id); err != nil {
		h.forgetRun(id)
		return err
	}
	if after, err := h.lookup(r.Context(), id); err != nil || after.SleepTier != api.SleepFreeze {
		h.forgetRun(id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) connect(w http.ResponseWriter, r *http.Request, id string) error {
	var body struct {
		Timeout *int64 `json:"timeout"`
		Memory  *bool  `json:"memory"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	sb, err := h.lookup(r.Context(), id)
	if err != nil {
		return err
	}
	status := http.StatusOK
	end := endOf(sb)
	if sb.State != api.StateRunning {
		status = http.StatusCreated
		if sb, _, err = h.b.GetOrCreate(r.Context(), api.CreateSandboxRequest{Name: id}, false); err != nil {
			return err
		}
		end = time.Time{}
	}
	if body.Timeout != nil || end.IsZero() {
		life, err := h.lifetime(body.Timeout)
		if err != nil {
			return err
		}
		if e := time.Now().Add(life); e.After(end) {
			if sb, err = h.b.SetLabels(r.Context(), id, map[string]string{labelEnd: e.UTC().Format(time.RFC3339Nano)}); err != nil {
				return err
			}
		}
	}
	writeJSON(w, status, h.sandboxBody(sb))
	return nil
}

func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request, id string) error {
	var body networkBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	policy, err := egressFor(body.AllowInternetAccess, &body)
	if err != nil {
		return err
	}
	if _, err := h.lookup(r.Context(), id); err != nil {
		return err
	}
	if _, err := h.b.SetNetwork(r.Context(), id, policy); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
