// Package page serves the Worker's live run page: a small single-page app of
// plain HTML, CSS and JavaScript, embedded in the binary, that lists the
// agents and their runs, starts runs, and follows one run live over the
// Worker's own API (docs/http-api.md). The server mounts Handler at /ui/.
//
// Every asset comes from this package: no build step, no CDN, no external
// fonts, so the page works on a closed network and a Worker upgrade always
// ships the matching page. The one library, dagre (the machine diagrams'
// layout), is vendored in assets/vendor (its README says from where).
// machines.json, the specs of the SDK's machines, is made here from package
// lifecycle, so the diagrams and the job actions follow the Go tables.
package page

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// The vendored library's README stays out of the binary; its LICENSE is
// served beside it.
//
//go:embed assets/*.html assets/*.js assets/*.css assets/*.svg assets/vendor/*.js assets/vendor/LICENSE
var embedded embed.FS

// asset is one embedded file, read once at start-up with its content type
// and a strong ETag over its bytes.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// contentTypes maps the extensions the page uses. They are fixed here rather
// than taken from mime.TypeByExtension, whose answers depend on the host's
// /etc/mime.types.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".json": "application/json",
	"":      "text/plain; charset=utf-8", // vendor/LICENSE
}

// csp allows only the Worker's own origin: the page loads nothing else and
// talks only to the API beside it.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Assets returns the names of the embedded files, for tests and tools.
func Assets() []string {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	return names
}

var files = load()

func load() map[string]asset {
	sub, err := fs.Sub(embedded, "assets")
	if err != nil {
		panic(err) // the directive above guarantees the folder
	}
	out := map[string]asset{}
	err = fs.WalkDir(sub, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, name)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(name)]
		if !ok {
			ct = "application/octet-stream"
		}
		out[name] = newAsset(b, ct)
		return nil
	})
	if err != nil {
		panic(err)
	}
	specs, err := json.Marshal(machines())
	if err != nil {
		panic(err) // plain strings: it cannot fail
	}
	out["machines.json"] = newAsset(specs, contentTypes[".json"])
	return out
}

func newAsset(b []byte, ct string) asset {
	sum := sha256.Sum256(b)
	return asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
}

// machines lists the SDK's machines for the page: the run machines an
// agent may use, the step's, the job's (whose requeue move the jobs view
// offers to the actors it names), the NLM job's and the inbox entry's.
func machines() []lifecycle.Spec {
	return []lifecycle.Spec{machine.CanonicalRun().Spec(), machine.CancelableRun().Spec(), machine.ApprovalRun().Spec(), machine.RunStep().Spec(), machine.JobMachine().Spec(), machine.GeneralJobMachine().Spec(), machine.NLMMachine().Spec(), machine.InboxMachine().Spec()}
}

// Handler serves the page. It answers a path ending in "/" with index.html
// and any other path by what follows /ui/ (or the leading "/"), so it works
// both mounted under a prefix (/ui/vendor/dagre.min.js) and behind
// http.StripPrefix (/vendor/dagre.min.js).
//
// Assets are served with Cache-Control: no-cache and an ETag: their names
// carry no content hash, so a browser must revalidate to pick up a new
// Worker's page, and the revalidation is a cheap 304.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, codes.MethodNotAllowed, "the page is read-only")
			return
		}
		name := "index.html"
		if p := r.URL.Path; p != "" && !strings.HasSuffix(p, "/") {
			if i := strings.Index(p, "/ui/"); i >= 0 {
				p = p[i+len("/ui/"):]
			}
			name = strings.TrimPrefix(path.Clean("/"+p), "/")
		}
		a, ok := files[name]
		if !ok {
			writeError(w, http.StatusNotFound, codes.NotFound, "no such page asset: "+name)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if a.contentType == contentTypes[".html"] {
			h.Set("Content-Security-Policy", csp)
		}
		// ServeContent answers If-None-Match with 304 and HEAD without a body.
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}

// writeError answers with the API's error shape, {"code", "message"}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}
