package page_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/page"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// get serves one request from the handler mounted as the server mounts it,
// at /ui/ without stripping the prefix.
func serve(t *testing.T, h http.Handler, method, target string, hdr map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHandlerServesAssetsWithTheirTypes(t *testing.T) {
	h := page.Handler()
	want := map[string]string{
		"/ui/":           "text/html; charset=utf-8",
		"/ui/index.html": "text/html; charset=utf-8",
		"/ui/app.js":     "text/javascript; charset=utf-8",
		"/ui/app.css":    "text/css; charset=utf-8",
		"/ui/icon.svg":   "image/svg+xml",
		"/app.js":        "text/javascript; charset=utf-8", // behind http.StripPrefix
		// The vendored layout library, by its path, and its license.
		"/ui/vendor/dagre.min.js": "text/javascript; charset=utf-8",
		"/vendor/dagre.min.js":    "text/javascript; charset=utf-8",
		"/ui/vendor/LICENSE":      "text/plain; charset=utf-8",
		"/ui/machines.json":       "application/json",
	}
	for target, ct := range want {
		res := serve(t, h, http.MethodGet, target, nil)
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s: status %d", target, res.StatusCode)
			continue
		}
		if got := res.Header.Get("Content-Type"); got != ct {
			t.Errorf("GET %s: Content-Type %q, want %q", target, got, ct)
		}
		if got := res.Header.Get("Cache-Control"); got != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q, want no-cache (names carry no hash)", target, got)
		}
		if res.Header.Get("ETag") == "" || res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: missing ETag or nosniff: %v", target, res.Header)
		}
		if body(t, res) == "" {
			t.Errorf("GET %s: empty body", target)
		}
	}
	// A name outside the assets is no asset, however it is spelled.
	for _, target := range []string{"/ui/../page.go", "/ui/vendor/README.md", "/ui/vendor/../../page.go"} {
		if res := serve(t, h, http.MethodGet, target, nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", target, res.StatusCode)
		}
	}
	index := serve(t, h, http.MethodGet, "/ui/", nil)
	if csp := index.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("index CSP = %q", csp)
	}
}

// machines.json is the SDK's specs: the page draws them and the jobs view
// offers requeue where the job machine lets the actor make it.
func TestMachinesJSON(t *testing.T) {
	var specs []lifecycle.Spec
	if err := json.Unmarshal([]byte(body(t, serve(t, page.Handler(), http.MethodGet, "/ui/machines.json", nil))), &specs); err != nil {
		t.Fatal(err)
	}
	byName := map[string]lifecycle.Spec{}
	for _, s := range specs {
		byName[s.Name] = s
	}
	job := machine.JobMachine().Spec()
	if got := byName["job"]; len(specs) != 8 || !reflect.DeepEqual(got.States, job.States) || len(got.Transitions) != len(job.Transitions) {
		t.Fatalf("machines.json: %d machines, job %+v", len(specs), got)
	}
	var requeue []string
	for _, tr := range byName["job"].Transitions {
		if tr.Event == string(machine.EventRequeue) {
			requeue = append(requeue, tr.From+" by "+fmt.Sprint(tr.Actors))
		}
	}
	if want := []string{"FAILED by [admin]", "DEAD by [admin]"}; !reflect.DeepEqual(requeue, want) {
		t.Errorf("requeue moves %v, want %v", requeue, want)
	}
	// The general machine, the user's job types', is there with its
	// cancel moves, which the jobs view offers.
	general := machine.GeneralJobMachine().Spec()
	var cancel []string
	for _, tr := range byName["general-job"].Transitions {
		if tr.Event == string(machine.EventCancel) {
			cancel = append(cancel, tr.From+" by "+fmt.Sprint(tr.Actors))
		}
	}
	if got := byName["general-job"]; !reflect.DeepEqual(got.States, general.States) ||
		!reflect.DeepEqual(cancel, []string{"QUEUED by [admin]", "RETRY_BACKOFF by [admin]", "RUNNING by [orchestration]"}) {
		t.Errorf("machines.json: general-job %v, cancel moves %v", got.States, cancel)
	}
}

func TestHandlerRevalidatesAndRefuses(t *testing.T) {
	h := page.Handler()
	first := serve(t, h, http.MethodGet, "/ui/app.js", nil)
	again := serve(t, h, http.MethodGet, "/ui/app.js", map[string]string{"If-None-Match": first.Header.Get("ETag")})
	if again.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation: status %d, want 304", again.StatusCode)
	}
	head := serve(t, h, http.MethodHead, "/ui/app.js", nil)
	if head.StatusCode != http.StatusOK || body(t, head) != "" {
		t.Errorf("HEAD: status %d", head.StatusCode)
	}
	missing := serve(t, h, http.MethodGet, "/ui/nope.js", nil)
	if b := body(t, missing); missing.StatusCode != http.StatusNotFound || !strings.Contains(b, `"code":"NOT_FOUND"`) {
		t.Errorf("missing asset: %d %s", missing.StatusCode, b)
	}
	post := serve(t, h, http.MethodPost, "/ui/", nil)
	if b := body(t, post); post.StatusCode != http.StatusMethodNotAllowed || post.Header.Get("Allow") != "GET, HEAD" ||
		!strings.Contains(b, `"code":"METHOD_NOT_ALLOWED"`) {
		t.Errorf("POST: %d %v %s", post.StatusCode, post.Header, b)
	}
}

// The page must work on a closed network: every asset it loads is served
// by the Worker. The SVG namespace is a name, not something fetched.
func TestAssetsReferenceNothingOutside(t *testing.T) {
	h := page.Handler()
	external := regexp.MustCompile(`(?i)https?://|//cdn|url\(\s*['"]?//|@import|src=["']//|href=["']//`)
	const svgNS = "http://www.w3.org/2000/svg"
	names := page.Assets()
	if len(names) < 4 {
		t.Fatalf("assets = %v", names)
	}
	for _, name := range names {
		text := body(t, serve(t, h, http.MethodGet, "/ui/"+name, nil))
		for _, loc := range external.FindAllStringIndex(strings.ReplaceAll(text, svgNS, ""), -1) {
			t.Errorf("%s references something outside the Worker: %q", name, text[loc[0]:min(len(text), loc[1]+30)])
		}
	}
	// Every file index.html names is one the handler serves.
	index := body(t, serve(t, h, http.MethodGet, "/ui/", nil))
	refs := regexp.MustCompile(`(?:src|href)="([^"#]+)"`).FindAllStringSubmatch(index, -1)
	if len(refs) < 3 {
		t.Fatalf("index.html names %d files", len(refs))
	}
	for _, ref := range refs {
		if res := serve(t, h, http.MethodGet, "/ui/"+ref[1], nil); res.StatusCode != http.StatusOK {
			t.Errorf("index.html names %s: status %d", ref[1], res.StatusCode)
		}
	}
}
