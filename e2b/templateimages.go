package e2b

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
)

// A template's images: how a tenant's template name:tag is named in the
// image store, and the routes that read, tag and delete them (aliases,
// tags, DELETE /templates/{id}) or start a sandbox from them. Builds are
// in templatebuild.go.

// splitTemplate splits "name[:tag]" and checks both parts; tag is ""
// when s names none.
func splitTemplate(s string) (name, tag string, err error) {
	name, tag, ok := strings.Cut(s, ":")
	if ok && tag == "" {
		return "", "", errdefs.InvalidArgument("template %q has an empty tag", s)
	}
	if !tplNameRE.MatchString(name) {
		return "", "", errdefs.InvalidArgument("invalid template name %q: use 1-63 of a-z, 0-9, '_' and '-', starting with a letter or digit", name)
	}
	if tag != "" && !tplTagRE.MatchString(tag) {
		return "", "", errdefs.InvalidArgument("invalid template tag %q: use 1-64 of a-z, 0-9, '.', '_' and '-'", tag)
	}
	return name, tag, nil
}

// defaultTag is the tag of a build that names none.
const defaultTag = "latest"

// tplPrefix is the image name prefix of tenant's template name: the
// operator's templates are "e2b-<name>:", a tenant's
// "e2b-t<12 hex of sha256(tenant)>.<name>:" (tenant names may hold '/',
// which image names cannot), so one tenant neither sees nor replaces nor
// deletes another's templates.
func tplPrefix(tenant, name string) string {
	if tenant == "" {
		return tplImagePrefix + name + ":"
	}
	return tplImagePrefix + tenantScope(tenant) + "." + name + ":"
}

// tenantScope names a tenant in image names and upload paths: "op" for
// the operator, "t<12 hex of sha256(tenant)>" for a tenant.
func tenantScope(tenant string) string {
	if tenant == "" {
		return "op"
	}
	sum := sha256.Sum256([]byte(tenant))
	return "t" + hex.EncodeToString(sum[:6])
}

var scopeRE = regexp.MustCompile(`^(op|t[0-9a-f]{12})$`)

func tplImage(tenant, name, tag string) string {
	if tag == "" {
		tag = defaultTag
	}
	return tplPrefix(tenant, name) + tag
}

// templateTagsOf lists the caller's images of template name, by tag
// (tenant-scoped: tplPrefix).
func (h *Handler) templateTagsOf(ctx context.Context, name string) (map[string]api.Image, error) {
	imgs, err := h.opts.Builds.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	prefix := tplPrefix(policy.TenantFrom(ctx), name)
	out := map[string]api.Image{}
	for _, img := range imgs {
		if t, ok := strings.CutPrefix(img.Name, prefix); ok {
			out[t] = img
		}
	}
	return out, nil
}

// templateImage finds the image of name:tag; with no tag, the "latest"
// tag or else the newest of the template's images.
func (h *Handler) templateImage(ctx context.Context, name, tag string) (api.Image, bool, error) {
	tags, err := h.templateTagsOf(ctx, name)
	if err != nil {
		return api.Image{}, false, err
	}
	if tag == "" {
		if img, ok := tags[defaultTag]; ok {
			return img, true, nil
		}
		var newest api.Image
		found := false
		for _, img := range tags {
			if !found || img.CreatedAt.After(newest.CreatedAt) {
				newest, found = img, true
			}
		}
		return newest, found, nil
	}
	img, ok := tags[tag]
	return img, ok, nil
}

// templateAlias is GET /templates/aliases/{alias}: 200 when the template
// exists (stock or built), 404 when not.
func (h *Handler) templateAlias(w http.ResponseWriter, r *http.Request, alias string) error {
	if _, ok := h.opts.Templates[alias]; ok {
		writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": true})
		return nil
	}
	if err := h.templatesOn(); err != nil {
		return err
	}
	name, tag, err := splitTemplate(alias)
	if err != nil {
		return err
	}
	if _, ok, err := h.templateImage(r.Context(), name, tag); err != nil || !ok {
		if err == nil {
			err = errdefs.NotFound("template %q not found", alias)
		}
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": name, "public": false})
	return nil
}

// templateTags lists a template's tags: GET /templates/{id}/tags.
func (h *Handler) templateTags(w http.ResponseWriter, r *http.Request, templateID string) error {
	if err := h.templatesOn(); err != nil {
		return err
	}
	if !tplNameRE.MatchString(templateID) {
		return errdefs.InvalidArgument("invalid template %q", templateID)
	}
	tags, err := h.templateTagsOf(r.Context(), templateID)
	if err != nil {
		return err
	}
	type tagBody struct {
		Tag       string    `json:"tag"`
		BuildID   string    `json:"buildID"`
		CreatedAt time.Time `json:"createdAt"`
	}
	out := []tagBody{}
	for t, img := range tags {
		out = append(out, tagBody{Tag: t, BuildID: img.Labels[labelTplBuild], CreatedAt: img.CreatedAt})
	}
	if len(out) == 0 {
		return errdefs.NotFound("template %q not found", templateID)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	writeJSON(w, http.StatusOK, out)
	return nil
}

// assignTags is POST /templates/tags {target: "name:tag", tags}.
func (h *Handler) assignTags(w http.ResponseWriter, r *http.Request) error {
	if err := h.templatesOn(); err != nil {
		return err
	}
	var body struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	name, tag, err := splitTemplate(body.Target)
	if err != nil {
		return err
	}
	img, ok, err := h.templateImage(r.Context(), name, tag)
	if err != nil {
		return err
	}
	if !ok {
		return errdefs.NotFound("template %q not found", body.Target)
	}
	if len(body.Tags) == 0 || len(body.Tags) > 16 {
		return errdefs.InvalidArgument("give 1 to 16 tags")
	}
	for _, t := range body.Tags {
		if !tplTagRE.MatchString(t) {
			return errdefs.InvalidArgument("invalid template tag %q", t)
		}
	}
	for _, t := range body.Tags {
		if err := h.opts.Builds.TagImage(r.Context(), tplImage(policy.TenantFrom(r.Context()), name, t), img.Digest); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusCreated, map[string]any{"buildID": img.Labels[labelTplBuild], "tags": body.Tags})
	return nil
}

// removeTags is DELETE /templates/tags {name, tags}.
func (h *Handler) removeTags(w http.ResponseWriter, r *http.Request) error {
	if err := h.templatesOn(); err != nil {
		return err
	}
	var body struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	name, _, err := splitTemplate(body.Name)
	if err != nil {
		return err
	}
	for _, t := range body.Tags {
		if !tplTagRE.MatchString(t) {
			return errdefs.InvalidArgument("invalid template tag %q", t)
		}
		if err := h.opts.Builds.RemoveImage(r.Context(), tplImage(policy.TenantFrom(r.Context()), name, t)); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteTemplate removes every tag of a built template; false when there
// is no built template of that name (the caller then tries a snapshot).
func (h *Handler) deleteTemplate(ctx context.Context, templateID string) (bool, error) {
	if h.opts.Builds == nil || !tplNameRE.MatchString(templateID) {
		return false, nil
	}
	tags, err := h.templateTagsOf(ctx, templateID)
	if err != nil {
		return false, err
	}
	for _, img := range tags {
		if err := h.opts.Builds.RemoveImage(ctx, img.Name); err != nil {
			return true, err
		}
	}
	return len(tags) > 0, nil
}

// resolveBuiltTemplate sets req's image and start command from a built
// template ("name" or "name:tag"); false when there is none.
func (h *Handler) resolveBuiltTemplate(ctx context.Context, tpl string, req *api.CreateSandboxRequest) (bool, error) {
	if h.opts.Builds == nil {
		return false, nil
	}
	name, tag, err := splitTemplate(tpl)
	if err != nil {
		return false, nil // not a template name; maybe a snapshot ID
	}
	img, ok, err := h.templateImage(ctx, name, tag)
	if err != nil || !ok {
		return false, err
	}
	req.Image = img.Name
	start, ready := decodeLabel(img.Labels[labelTplStart]), decodeLabel(img.Labels[labelTplReady])
	if start != "" {
		req.Start = &api.StartCommand{Command: start}
		if ready != "" {
			req.Start.Ready = &api.Readiness{Command: &api.ReadyCommand{Command: ready}}
		}
	}
	return true, nil
}
