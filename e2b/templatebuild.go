package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
)

// The E2B template build API (Template.build, exists, tags) over berth's
// Dockerfile builder. A template is a set of berth images named
// "e2b-<name>:<tag>"; a build turns the SDK's recipe (base, steps, start
// and ready commands) into a Dockerfile and a context (the files the SDK
// uploaded by hash) and runs it through the builder like any
// `berth image build`. The start and ready commands ride in the image's
// labels, so a sandbox made from the template runs them (api.StartCommand
// with a ready command) on every host and after a restart. Build records
// (status, logs) live in memory: a build in flight when the daemon stops
// is lost, the images it finished are not.

// TemplateImages is what the template API needs from the image side:
// builds (package imagebuild through the control plane's ImageBuilds),
// the image list and names.
type TemplateImages interface {
	BuildImage(ctx context.Context, req api.BuildRequest, contextTar io.Reader, progress func(api.Progress)) (api.Image, error)
	ListImages(ctx context.Context) ([]api.Image, error)
	TagImage(ctx context.Context, name, ref string) error
	RemoveImage(ctx context.Context, ref string) error
}

// Image labels of a template image.
const (
	labelTplStart  = "sh.berth.e2b.start-cmd" // base64 of the start command
	labelTplReady  = "sh.berth.e2b.ready-cmd" // base64 of the ready command
	labelTplBuild  = "sh.berth.e2b.build-id"
	tplImagePrefix = "e2b-"
	// stockBase is the SDK's default base image and the stock template.
	stockBase = "e2bdev/base"
	// maxUploadBytes caps one uploaded file set (a tar, gzipped or not).
	maxUploadBytes = 2 << 30
	maxBuildLog    = 20000 // log entries kept per build
)

var (
	tplNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	tplTagRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	hashRE    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// templateBuilds holds the builds of this process.
type templateBuilds struct {
	mu     sync.Mutex
	builds map[string]*tplBuild // by build ID
}

type tplBuild struct {
	id, template string
	tags         []string
	tenant       string
	cpu, memMB   int
	status       string // waiting, building, ready, error
	logs         []logEntryBody
	reason       *reasonBody
	created      time.Time
}

type logEntryBody struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

type reasonBody struct {
	Message    string         `json:"message"`
	Step       string         `json:"step,omitempty"`
	LogEntries []logEntryBody `json:"logEntries"`
}

func newBuildID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (h *Handler) templatesOn() error {
	if h.opts.Builds == nil || h.opts.BuildDir == "" {
		return errdefs.NotFound("template builds are not enabled on this berth")
	}
	return nil
}

type templateRequestBody struct {
	Name          string   `json:"name"`
	Alias         string   `json:"alias"`
	Tags          []string `json:"tags"`
	CPUCount      int      `json:"cpuCount"`
	MemoryMB      int      `json:"memoryMB"`
	MinFreeDiskMb int      `json:"minFreeDiskMb"`
	TeamID        string   `json:"teamID"`
}

// requestTemplate is POST /v3/templates: a template (by name) and a new
// build of it, waiting for its recipe.
func (h *Handler) requestTemplate(w http.ResponseWriter, r *http.Request) error {
	if err := h.templatesOn(); err != nil {
		return err
	}
	var body templateRequestBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if body.Name == "" {
		body.Name = body.Alias
	}
	name, tag, err := splitTemplate(body.Name)
	if err != nil {
		return err
	}
	if tag == "" {
		tag = defaultTag
	}
	tags := []string{tag}
	for _, t := range body.Tags {
		if !tplTagRE.MatchString(t) {
			return errdefs.InvalidArgument("invalid template tag %q: use 1-64 of a-z, 0-9, '.', '_' and '-'", t)
		}
		if t != tag {
			tags = append(tags, t)
		}
	}
	if len(tags) > 16 {
		return errdefs.InvalidArgument("%d tags, at most 16", len(tags))
	}
	b := &tplBuild{id: newBuildID(), template: name, tags: tags, tenant: policy.TenantFrom(r.Context()),
		cpu: body.CPUCount, memMB: body.MemoryMB, status: "waiting", created: time.Now().UTC()}
	h.tpl.mu.Lock()
	if h.tpl.builds == nil {
		h.tpl.builds = map[string]*tplBuild{}
	}
	h.tpl.builds[b.id] = b
	h.tpl.mu.Unlock()
	writeJSON(w, http.StatusAccepted, map[string]any{
		"templateID": name, "buildID": b.id, "tags": tags, "names": []string{name},
		"aliases": []string{name}, "public": false,
	})
	return nil
}

// build finds a build of this template the caller may see.
func (h *Handler) build(r *http.Request, templateID, buildID string) (*tplBuild, error) {
	h.tpl.mu.Lock()
	defer h.tpl.mu.Unlock()
	b, ok := h.tpl.builds[buildID]
	if !ok || b.template != templateID || b.tenant != policy.TenantFrom(r.Context()) {
		return nil, errdefs.NotFound("build %q of template %q not found (build records do not survive a restart of berth)", buildID, templateID)
	}
	return b, nil
}

// uploadToken signs an upload URL for the file set hash of a template
// of the tenant whose scope is scope.
func (h *Handler) uploadToken(scope, templateID, hash string) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte("e2b-template-upload\x00" + scope + "\x00" + templateID + "\x00" + hash))
	return hex.EncodeToString(m.Sum(nil))
}

// uploadPath is where a file set is kept: per tenant scope and template,
// so one tenant's upload never stands in for another's.
func (h *Handler) uploadPath(scope, templateID, hash string) string {
	return filepath.Join(h.opts.BuildDir, "files", scope, templateID, hash)
}

// fileUploadLink is GET /templates/{id}/files/{hash}: whether the file
// set is here already, and where to PUT it if not (a URL to this server
// signed for this template and hash, as E2B's are presigned).
func (h *Handler) fileUploadLink(w http.ResponseWriter, r *http.Request, templateID, hash string) error {
	if err := h.templatesOn(); err != nil {
		return err
	}
	if !tplNameRE.MatchString(templateID) || !hashRE.MatchString(hash) {
		return errdefs.InvalidArgument("invalid template %q or files hash %q (want 64 hex digits)", templateID, hash)
	}
	scope := tenantScope(policy.TenantFrom(r.Context()))
	_, err := os.Stat(h.uploadPath(scope, templateID, hash))
	present := err == nil
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	url := fmt.Sprintf("%s://%s/templates/%s/files/%s?scope=%s&token=%s", scheme, r.Host, templateID, hash, scope, h.uploadToken(scope, templateID, hash))
	writeJSON(w, http.StatusOK, map[string]any{"present": present, "url": url})
	return nil
}

// isTemplateUpload is a PUT of an upload link: it carries its signature,
// not the API key.
func isTemplateUpload(r *http.Request) (templateID, hash string, ok bool) {
	if r.Method != http.MethodPut || r.URL.Query().Get("token") == "" {
		return "", "", false
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) != 4 || parts[0] != "templates" || parts[2] != "files" {
		return "", "", false
	}
	return parts[1], parts[3], true
}

// upload stores one uploaded file set, capped, written to a temporary
// file and renamed into place once complete.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request, templateID, hash string) error {
	if err := h.templatesOn(); err != nil {
		return err
	}
	if !tplNameRE.MatchString(templateID) || !hashRE.MatchString(hash) {
		return errdefs.InvalidArgument("invalid template %q or files hash %q", templateID, hash)
	}
	scope := r.URL.Query().Get("scope")
	if !scopeRE.MatchString(scope) {
		return errdefs.Unauthenticated("invalid upload link (scope %q)", scope)
	}
	want := h.uploadToken(scope, templateID, hash)
	if subtle.ConstantTimeCompare([]byte(r.URL.Query().Get("token")), []byte(want)) != 1 {
		return errdefs.Unauthenticated("invalid upload token")
	}
	dst := h.uploadPath(scope, templateID, hash)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(dst), ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, http.MaxBytesReader(w, r.Body, maxUploadBytes))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errdefs.InvalidArgument("upload of %s: %w (at most %d bytes)", hash, err, int64(maxUploadBytes))
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return err
	}
	h.opts.Logf("e2b template %s: stored file set %s (%d bytes)", templateID, hash[:12], n)
	w.WriteHeader(http.StatusOK)
	return nil
}

type templateStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	Force     bool     `json:"force"`
	FilesHash string   `json:"filesHash"`
	// The SDK sends these too; berth has nothing to do with them.
	ForceUpload     *bool `json:"forceUpload"`
	ResolveSymlinks *bool `json:"resolveSymlinks"`
	Gzip            *bool `json:"gzip"`
}

type buildStartBody struct {
	FromImage         string         `json:"fromImage"`
	FromTemplate      string         `json:"fromTemplate"`
	FromImageRegistry map[string]any `json:"fromImageRegistry"`
	StartCmd          string         `json:"startCmd"`
	ReadyCmd          string         `json:"readyCmd"`
	Steps             []templateStep `json:"steps"`
	Force             bool           `json:"force"`
}

// startBuild is POST /v2/templates/{id}/builds/{buildID}: the recipe.
// It is translated (errors answer 400 at once), then built in the
// background; the status call reports progress and the end.
func (h *Handler) startBuild(w http.ResponseWriter, r *http.Request, templateID, buildID string) error {
	if err := h.templatesOn(); err != nil {
		return err
	}
	b, err := h.build(r, templateID, buildID)
	if err != nil {
		return err
	}
	var body buildStartBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if body.FromImageRegistry != nil {
		return errdefs.InvalidArgument("fromImageRegistry (registry credentials) is not supported by berth: pull the image with `berth image pull` and use its name")
	}
	base, err := h.templateBase(r.Context(), body)
	if err != nil {
		return err
	}
	scope := tenantScope(b.tenant)
	df, files, err := templateDockerfile(base, body, buildID, func(hash string) string { return h.uploadPath(scope, templateID, hash) })
	if err != nil {
		return err
	}
	h.tpl.mu.Lock()
	if b.status != "waiting" {
		h.tpl.mu.Unlock()
		return errdefs.FailedPrecondition("build %s was started already (%s)", buildID, b.status)
	}
	b.status = "building"
	h.tpl.mu.Unlock()
	ctx := context.WithoutCancel(r.Context())
	go h.runTemplateBuild(ctx, b, df, files, body.Force)
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// templateBase is the FROM of a recipe: the stock base (the SDK's
// default image, or a template of the templates file), another built
// template, or an image reference as berth resolves it.
func (h *Handler) templateBase(ctx context.Context, body buildStartBody) (string, error) {
	switch {
	case body.FromImage != "" && body.FromTemplate != "":
		return "", errdefs.InvalidArgument("give fromImage or fromTemplate, not both")
	case body.FromTemplate != "":
		if img, ok := h.opts.Templates[body.FromTemplate]; ok {
			return img, nil
		}
		name, tag, err := splitTemplate(body.FromTemplate)
		if err != nil {
			return "", err
		}
		img, ok, err := h.templateImage(ctx, name, tag)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", errdefs.NotFound("template %q not found", body.FromTemplate)
		}
		return img.Name, nil
	case body.FromImage == "" || body.FromImage == stockBase:
		if img, ok := h.opts.Templates["base"]; ok {
			return img, nil
		}
		return "debian-trixie", nil
	}
	return body.FromImage, nil
}

func (h *Handler) logBuild(b *tplBuild, level, msg string) {
	h.tpl.mu.Lock()
	defer h.tpl.mu.Unlock()
	if len(b.logs) < maxBuildLog {
		b.logs = append(b.logs, logEntryBody{Timestamp: time.Now().UTC(), Level: level, Message: msg})
	}
}

// runTemplateBuild builds the context and tags the result with every tag
// of the build.
func (h *Handler) runTemplateBuild(ctx context.Context, b *tplBuild, dockerfile string, files []string, force bool) {
	pr, pw := io.Pipe()
	go func() {
		scope := tenantScope(b.tenant)
		pw.CloseWithError(writeTemplateContext(pw, dockerfile, files, func(hash string) string { return h.uploadPath(scope, b.template, hash) }))
	}()
	req := api.BuildRequest{Name: tplImage(b.tenant, b.template, b.tags[0]), NoCache: force}
	h.logBuild(b, "info", fmt.Sprintf("Building template %s (berth image %s)", b.template, req.Name))
	h.logBuild(b, "debug", "The recipe as berth builds it (line numbers in errors refer to it):\n"+dockerfile)
	img, err := h.opts.Builds.BuildImage(ctx, req, pr, func(p api.Progress) {
		if p.Message != "" {
			h.logBuild(b, "info", p.Message)
		}
	})
	pr.CloseWithError(err)
	for _, t := range b.tags[1:] {
		if err != nil {
			break
		}
		err = h.opts.Builds.TagImage(ctx, tplImage(b.tenant, b.template, t), img.Digest)
	}
	h.tpl.mu.Lock()
	defer h.tpl.mu.Unlock()
	if err != nil {
		b.status = "error"
		b.reason = &reasonBody{Message: err.Error(), LogEntries: []logEntryBody{}}
		b.logs = append(b.logs, logEntryBody{Timestamp: time.Now().UTC(), Level: "error", Message: err.Error()})
		h.opts.Logf("e2b template %s build %s: %v", b.template, b.id, err)
		return
	}
	b.status = "ready"
	b.logs = append(b.logs, logEntryBody{Timestamp: time.Now().UTC(), Level: "info", Message: fmt.Sprintf("Template %s built: %s", b.template, img.Digest)})
}

// buildStatus is GET /templates/{id}/builds/{buildID}/status?logsOffset=N.
func (h *Handler) buildStatus(w http.ResponseWriter, r *http.Request, templateID, buildID string) error {
	if err := h.templatesOn(); err != nil {
		return err
	}
	b, err := h.build(r, templateID, buildID)
	if err != nil {
		return err
	}
	off := 0
	if s := r.URL.Query().Get("logsOffset"); s != "" {
		if _, err := fmt.Sscan(s, &off); err != nil || off < 0 {
			return errdefs.InvalidArgument("logsOffset must be a non-negative integer, not %q", s)
		}
	}
	h.tpl.mu.Lock()
	defer h.tpl.mu.Unlock()
	entries := []logEntryBody{}
	if off < len(b.logs) {
		entries = append(entries, b.logs[off:]...)
	}
	out := map[string]any{"buildID": b.id, "templateID": b.template, "status": b.status,
		"logEntries": entries, "logs": []string{}}
	if b.reason != nil {
		out["reason"] = b.reason
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
