package e2b

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// fakeImages is a builder that records each build's context and names.
type fakeImages struct {
	mu       sync.Mutex
	imgs     map[string]api.Image // by name
	contexts map[string]map[string]string
	fail     error
}

func (f *fakeImages) BuildImage(_ context.Context, req api.BuildRequest, r io.Reader, progress func(api.Progress)) (api.Image, error) {
	files := map[string]string{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return api.Image{}, err
		}
		b, _ := io.ReadAll(tr)
		files[hdr.Name] = string(b)
	}
	progress(api.Progress{Message: "Step 1/2 : FROM"})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.contexts[req.Name] = files
	if f.fail != nil {
		return api.Image{}, f.fail
	}
	labels := map[string]string{}
	for _, l := range strings.Split(files["Dockerfile"], "\n") {
		if rest, ok := strings.CutPrefix(l, "LABEL "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				labels[k] = v
			}
		}
	}
	img := api.Image{Name: req.Name, Digest: "sha256:" + strings.Repeat("a", 64), Labels: labels, CreatedAt: time.Now()}
	f.imgs[req.Name] = img
	return img, nil
}

func (f *fakeImages) ListImages(context.Context) ([]api.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Image
	for _, i := range f.imgs {
		out = append(out, i)
	}
	return out, nil
}

func (f *fakeImages) TagImage(_ context.Context, name, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, i := range f.imgs {
		if i.Digest == ref {
			i.Name = name
			f.imgs[name] = i
			return nil
		}
	}
	return errdefs.NotFound("no %s", ref)
}

func (f *fakeImages) RemoveImage(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.imgs[ref]; !ok {
		return errdefs.NotFound("no %s", ref)
	}
	delete(f.imgs, ref)
	return nil
}

// names lists the images' names (under the lock: builds run in their own
// goroutines).
func (f *fakeImages) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.imgs {
		out = append(out, n)
	}
	return out
}

func tplServer(t *testing.T) (*fakeImages, *fakeBackend, string) {
	fb, _ := newFake(t)
	fi := &fakeImages{imgs: map[string]api.Image{}, contexts: map[string]map[string]string{}}
	h := New(fb, Options{APIKey: testKey, Builds: fi, BuildDir: t.TempDir()})
	srv := httptest.NewServer(h.Wrap(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	return fi, fb, srv.URL
}

func call(t *testing.T, method, url, body, key string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, b)
		}
	}
	return res.StatusCode
}

func gzTar(t *testing.T, files map[string]string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// The SDK's Template.build sequence: request a build, upload a file set
// by hash through the signed link, start the build with a recipe, poll
// its status with logs; then the alias exists, and a sandbox created
// from it gets the image and the start and ready commands.
func TestTemplateBuildFlow(t *testing.T) {
	fi, fb, base := tplServer(t)
	var tr struct {
		TemplateID, BuildID string
		Tags                []string
	}
	if st := call(t, "POST", base+"/v3/templates", `{"name":"my-app:v1","tags":["stable"]}`, testKey, &tr); st != 202 || tr.TemplateID != "my-app" || len(tr.Tags) != 2 {
		t.Fatalf("request build: %d %+v", st, tr)
	}
	hash := strings.Repeat("b", 64)
	var link struct {
		Present bool
		URL     string
	}
	if st := call(t, "GET", base+"/templates/my-app/files/"+hash, "", testKey, &link); st != 200 || link.Present || link.URL == "" {
		t.Fatalf("upload link: %d %+v", st, link)
	}
	// The link's token is for this hash only: a forged one is refused.
	forged := strings.Replace(link.URL, "token=", "token=00", 1)
	if st := call(t, "PUT", forged, "x", "", nil); st != 401 {
		t.Fatalf("forged upload token: %d, want 401", st)
	}
	if st := call(t, "PUT", link.URL, string(gzTar(t, map[string]string{"app/main.py": "print('hi')\n"})), "", nil); st != 200 {
		t.Fatalf("upload: %d", st)
	}
	call(t, "GET", base+"/templates/my-app/files/"+hash, "", testKey, &link)
	if !link.Present {
		t.Fatal("the uploaded file set is not present")
	}
	recipe := `{"fromImage":"e2bdev/base","startCmd":"python3 -m http.server 8000","readyCmd":"[ -n \"$(ss -Htuln sport = :8000)\" ]","steps":[
		{"type":"RUN","args":["apt-get install -y jq","root"]},
		{"type":"COPY","args":["app","/home/user/app","",""],"filesHash":"` + hash + `"},
		{"type":"ENV","args":["GREETING","say \"hi\" $HOME"]},
		{"type":"WORKDIR","args":["/home/user/app"]}]}`
	if st := call(t, "POST", base+"/v2/templates/my-app/builds/"+tr.BuildID, recipe, testKey, nil); st != 202 {
		t.Fatalf("start build: %d", st)
	}
	var status struct {
		Status     string
		LogEntries []struct{ Message string }
	}
	for deadline := time.Now().Add(10 * time.Second); status.Status != "ready"; {
		if time.Now().After(deadline) {
			t.Fatalf("build status: %+v", status)
		}
		call(t, "GET", base+"/templates/my-app/builds/"+tr.BuildID+"/status?logsOffset=0", "", testKey, &status)
		time.Sleep(10 * time.Millisecond)
	}
	if len(status.LogEntries) < 2 {
		t.Fatalf("log entries: %+v", status.LogEntries)
	}
	fi.mu.Lock()
	ctx := fi.contexts["e2b-my-app:v1"]
	_, stable := fi.imgs["e2b-my-app:stable"]
	fi.mu.Unlock()
	df := ctx["Dockerfile"]
	for _, want := range []string{
		"FROM debian-trixie\nUSER user\n",
		"USER root\nRUN [\"/bin/sh\",\"-c\",\"apt-get install -y jq\"]\nUSER user\n",
		`COPY --chown=user ["files/` + hash + `/app","/home/user/app"]`,
		`ENV GREETING="say \"hi\" \$HOME"`,
		"WORKDIR /home/user/app\n",
	} {
		if !strings.Contains(df, want) {
			t.Fatalf("Dockerfile lacks %q:\n%s", want, df)
		}
	}
	if ctx["files/"+hash+"/app/main.py"] != "print('hi')\n" {
		t.Fatalf("context files: %v", ctx)
	}
	if !stable {
		t.Fatalf("the stable tag was not given: %v", fi.names())
	}
	if st := call(t, "GET", base+"/templates/aliases/my-app", "", testKey, nil); st != 200 {
		t.Fatalf("alias: %d", st)
	}
	if st := call(t, "GET", base+"/templates/aliases/other", "", testKey, nil); st != 404 {
		t.Fatalf("unknown alias: %d, want 404", st)
	}
	var sb sandboxBody
	if st := call(t, "POST", base+"/sandboxes", `{"templateID":"my-app:stable"}`, testKey, &sb); st != 201 {
		t.Fatalf("create from template: %d", st)
	}
	fb.mu.Lock()
	got := fb.sbs[sb.SandboxID]
	fb.mu.Unlock()
	if got.Image != "e2b-my-app:stable" || got.Start == nil || got.Start.Command != "python3 -m http.server 8000" ||
		got.Start.Ready == nil || got.Start.Ready.Command.Command != `[ -n "$(ss -Htuln sport = :8000)" ]` {
		t.Fatalf("sandbox from the template: image %q start %+v", got.Image, got.Start)
	}
	var tags []struct{ Tag string }
	if st := call(t, "GET", base+"/templates/my-app/tags", "", testKey, &tags); st != 200 || len(tags) != 2 {
		t.Fatalf("tags: %d %+v", st, tags)
	}
	if st := call(t, "DELETE", base+"/templates/my-app", "", testKey, nil); st != 204 || len(fi.names()) != 0 {
		t.Fatalf("delete template: %d, images left %v", st, fi.names())
	}
}

// Hostile recipes and uploads are refused with the step named; a recipe
// of the same shape with plain values builds (the negative control is
// TestTemplateBuildFlow).
func TestTemplateRecipeRefusals(t *testing.T) {
	none := func(string) string { return "/nonexistent" }
	for _, c := range []struct{ step, want string }{
		{`{"type":"COPY","args":["../../etc","/x"],"filesHash":"` + strings.Repeat("c", 64) + `"}`, "outside the template's context"},
		{`{"type":"COPY","args":["*.py","/x"],"filesHash":"` + strings.Repeat("c", 64) + `"}`, "wildcards"},
		{`{"type":"COPY","args":["a","/x"],"filesHash":"` + strings.Repeat("c", 64) + `"}`, "were not uploaded"},
		{`{"type":"COPY","args":["a","/x\ny"],"filesHash":"` + strings.Repeat("c", 64) + `"}`, "characters"},
		{`{"type":"WORKDIR","args":["/a\nRUN evil"]}`, "WORKDIR"},
		{`{"type":"USER","args":["root\nRUN evil"]}`, "USER"},
		{`{"type":"ENV","args":["A","b\nRUN evil"]}`, "line break"},
		{`{"type":"ENV","args":["1A","b"]}`, "variable name"},
		{`{"type":"RUN","args":["x","bad user"]}`, "invalid user"},
		{`{"type":"ARG","args":["x"]}`, "does not support"},
	} {
		var body buildStartBody
		if err := json.Unmarshal([]byte(`{"steps":[`+c.step+`]}`), &body); err != nil {
			t.Fatal(err)
		}
		_, _, err := templateDockerfile("debian-trixie", body, "b1", none)
		if !errdefs.IsKind(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "step 1") {
			t.Fatalf("%s: %v, want invalid argument naming step 1 and %q", c.step, err, c.want)
		}
	}
	// A RUN command with newlines and $ stays one exec-form instruction.
	var body buildStartBody
	json.Unmarshal([]byte(`{"steps":[{"type":"RUN","args":["echo $HOME\nFROM evil"]}]}`), &body)
	df, _, err := templateDockerfile("debian-trixie", body, "b1", none)
	if err != nil || strings.Contains(df, "\nFROM evil") || !strings.Contains(df, `RUN ["/bin/sh","-c","echo $HOME\nFROM evil"]`) {
		t.Fatalf("multi-line RUN: %v\n%s", err, df)
	}
}

// An upload whose entries climb out of it (or would replace the
// Dockerfile) fails the context; plain entries are copied under
// files/<hash>/.
func TestTemplateUploadEntriesStayInside(t *testing.T) {
	dir := t.TempDir()
	hash := strings.Repeat("d", 64)
	for _, name := range []string{"../Dockerfile", "/etc/passwd", "a/../../x"} {
		p := dir + "/" + name[:1] + "up"
		if err := writeFile(p, gzTar(t, map[string]string{name: "evil"})); err != nil {
			t.Fatal(err)
		}
		err := writeTemplateContext(io.Discard, "FROM x\n", []string{hash}, func(string) string { return p })
		if !errdefs.IsKind(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "outside") {
			t.Fatalf("entry %q: %v, want refused", name, err)
		}
	}
	p := dir + "/ok"
	writeFile(p, gzTar(t, map[string]string{"a/b.txt": "fine"}))
	var buf bytes.Buffer
	if err := writeTemplateContext(&buf, "FROM x\n", []string{hash}, func(string) string { return p }); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	var names []string
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, hdr.Name)
	}
	if strings.Join(names, ",") != "Dockerfile,files/"+hash+"/a/b.txt" {
		t.Fatalf("context entries: %v", names)
	}
}

func writeFile(p string, b []byte) error { return os.WriteFile(p, b, 0o600) }

// A tenant's templates are its own: another tenant's key sees no alias,
// cannot create from it, tag it or delete it; the owner can (the
// negative control).
func TestTemplatesAreTenantScoped(t *testing.T) {
	fb, _ := newFake(t)
	fi := &fakeImages{imgs: map[string]api.Image{}, contexts: map[string]map[string]string{}}
	keys := map[string]string{"key-a": "team/a", "key-b": "team/b"}
	h := New(fb, Options{APIKey: testKey, Builds: fi, BuildDir: t.TempDir(),
		Tenants: func(k string) (string, bool) { v, ok := keys[k]; return v, ok }})
	srv := httptest.NewServer(h.Wrap(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	base := srv.URL
	var tr struct{ TemplateID, BuildID string }
	if st := call(t, "POST", base+"/v3/templates", `{"name":"shared"}`, "key-a", &tr); st != 202 {
		t.Fatalf("request build: %d", st)
	}
	if st := call(t, "POST", base+"/v2/templates/shared/builds/"+tr.BuildID, `{"steps":[{"type":"RUN","args":["true"]}]}`, "key-b", nil); st != 404 {
		t.Fatalf("tenant b started tenant a's build: %d, want 404", st)
	}
	if st := call(t, "POST", base+"/v2/templates/shared/builds/"+tr.BuildID, `{"steps":[{"type":"RUN","args":["true"]}]}`, "key-a", nil); st != 202 {
		t.Fatalf("start build: %d", st)
	}
	for deadline := time.Now().Add(10 * time.Second); len(fi.names()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the build did not finish")
		}
	}
	for _, name := range fi.names() {
		if !strings.HasPrefix(name, "e2b-t") || !strings.HasSuffix(name, ".shared:latest") {
			t.Fatalf("tenant a's template image is named %q", name)
		}
	}
	if st := call(t, "GET", base+"/templates/aliases/shared", "", "key-a", nil); st != 200 {
		t.Fatalf("owner's alias: %d", st)
	}
	for _, key := range []string{"key-b", testKey} {
		if st := call(t, "GET", base+"/templates/aliases/shared", "", key, nil); st != 404 {
			t.Fatalf("%s sees tenant a's template: %d", key, st)
		}
		if st := call(t, "POST", base+"/sandboxes", `{"templateID":"shared"}`, key, nil); st != 404 {
			t.Fatalf("%s created from tenant a's template: %d", key, st)
		}
		if st := call(t, "POST", base+"/templates/tags", `{"target":"shared:latest","tags":["x"]}`, key, nil); st != 404 {
			t.Fatalf("%s tagged tenant a's template: %d", key, st)
		}
	}
	// Uploads are per tenant too: tenant a's file set is not present for
	// tenant b (whose link is its own), and a's link cannot be replayed
	// with b's scope.
	hash := strings.Repeat("e", 64)
	var la, lb struct {
		Present bool
		URL     string
	}
	call(t, "GET", base+"/templates/shared/files/"+hash, "", "key-a", &la)
	if st := call(t, "PUT", la.URL, string(gzTar(t, map[string]string{"f": "a's"})), "", nil); st != 200 {
		t.Fatalf("tenant a's upload: %d", st)
	}
	call(t, "GET", base+"/templates/shared/files/"+hash, "", "key-b", &lb)
	if lb.Present || lb.URL == la.URL {
		t.Fatalf("tenant b sees tenant a's upload (present %v) or gets its link", lb.Present)
	}
	call(t, "GET", base+"/templates/shared/files/"+hash, "", "key-a", &la)
	if !la.Present {
		t.Fatal("negative control: tenant a's own upload is not present for it")
	}
	swapped := strings.Replace(la.URL, "scope=t", "scope=op&x=t", 1)
	if st := call(t, "PUT", swapped, "evil", "", nil); st != 401 {
		t.Fatalf("a's token under another scope: %d, want 401", st)
	}

	call(t, "DELETE", base+"/templates/shared", "", "key-b", nil)
	if n := fi.names(); len(n) != 1 {
		t.Fatalf("tenant b's delete removed tenant a's template: %v", n)
	}
	if st := call(t, "DELETE", base+"/templates/shared", "", "key-a", nil); st != 204 || len(fi.names()) != 0 {
		t.Fatalf("owner's delete: %d, left %v", st, fi.names())
	}
}
