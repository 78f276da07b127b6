// Package page serves the Worker's live run page: a small single-page app of
// plain HTML, CSS and JavaScript, embedded in the binary, that lists the
// agents and their runs, starts runs, and follows one run live over the
// Worker's own API (docs/http-api.md). The server mounts Handler at /ui/.
//
// Every asset comes from this package: no build step, no CDN, no external
// fonts, so the page works on a closed network and a Worker upgrade always
// ships the matching page.
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

	"github.com/runconveyor/conveyor/lifecycle/codes"
)

//go:embed assets
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
		sum := sha256.Sum256(b)
		out[name] = asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(err)
	}
	return out
}

// Handler serves the page. It answers a path ending in "/" with index.html
// and any other path by its last element, so it works both mounted under a
// prefix (/ui/app.js) and behind http.StripPrefix (/app.js).
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
			name = path.Base(p)
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
