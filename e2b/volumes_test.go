package e2b

import (
	"encoding/json"
	"net/http"
	"testing"
)

// volumeMounts on create maps onto berth volume mounts, and the sandbox's
// detail lists them; a traversing path is refused with 400.
func TestCreateWithVolumeMounts(t *testing.T) {
	e := setup(t)
	res := e.control(http.MethodPost, "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"data","path":"/data"}]}`, testKey)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create with volumeMounts: %d %+v", res.StatusCode, decodeErr(t, res))
	}
	var sb sandboxBody
	if err := json.NewDecoder(res.Body).Decode(&sb); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := e.f.sbs[sb.SandboxID].Volumes; len(got) != 1 || got[0].Name != "data" || got[0].Path != "/data" || got[0].ReadOnly {
		t.Fatalf("berth request's volumes: %+v", got)
	}
	res = e.control(http.MethodGet, "/sandboxes/"+sb.SandboxID, "", testKey)
	var d detailBody
	if err := json.NewDecoder(res.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if len(d.VolumeMounts) != 1 || d.VolumeMounts[0].Name != "data" || d.VolumeMounts[0].Path != "/data" {
		t.Fatalf("detail volumeMounts: %+v", d.VolumeMounts)
	}
	res = e.control(http.MethodPost, "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"data","path":"/data/../etc"}]}`, testKey)
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("traversing mount path: %d", res.StatusCode)
	}
	res.Body.Close()
}
