package wire

import (
	"net/http"
	"net/url"
	"strings"
)

// NextCursor returns the cursor of the Link rel="next" in h (RFC 8288),
// "" when there is none.
func NextCursor(h http.Header) string {
	for _, v := range h.Values("Link") {
		for link := range strings.SplitSeq(v, ",") {
			target, params, ok := strings.Cut(link, ";")
			target = strings.TrimSpace(target)
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			if !isNext(params) {
				continue
			}
			u, err := url.Parse(target[1 : len(target)-1])
			if err != nil {
				continue
			}
			return u.Query().Get("cursor")
		}
	}
	return ""
}

// isNext tells whether a link's parameters hold rel="next" (rel may list
// several relation types).
func isNext(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "rel") {
			continue
		}
		for rel := range strings.FieldsSeq(strings.Trim(strings.TrimSpace(v), `"`)) {
			if strings.EqualFold(rel, "next") {
				return true
			}
		}
	}
	return false
}
