package httpapi

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// callbackRoute serves POST /nlm/callback over the NLM processor's sink,
// nil when no processor is served.
type callbackRoute struct {
	sink http.Handler
}

// nlmCallback checks the body as strictly as every other route, then hands
// it to nlm.Sink; the Sink's plain-text refusals become the JSON form.
func (h *callbackRoute) nlmCallback(w http.ResponseWriter, r *http.Request, _ lifecycle.Actor) error {
	if h.sink == nil {
		return absent("NLM processor")
	}
	data, err := readBody(r)
	if err != nil {
		return err
	}
	if _, err := decodeCallback(data); err != nil {
		return err
	}
	r2 := r.Clone(r.Context())
	r2.Body, r2.ContentLength = readCloser{bytes.NewReader(data)}, int64(len(data))
	cw := &captureWriter{header: http.Header{}}
	h.sink.ServeHTTP(cw, r2)
	if cw.status == 0 || cw.status < 400 {
		w.WriteHeader(max(cw.status, http.StatusNoContent))
		return nil
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(cw.body.String()), "\n")
	code := codes.OfStatus(cw.status)
	if cw.status == http.StatusNotFound {
		code = codes.JobNotFound
	}
	if codes.HTTPStatus(code) != cw.status {
		code = codes.InternalError
	}
	return apiErr(code, "%s", msg)
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// captureWriter holds nlm.Sink's answer.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(s int) {
	if c.status == 0 {
		c.status = s
	}
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.body.Len() < 4096 {
		c.body.Write(b)
	}
	return len(b), nil
}
