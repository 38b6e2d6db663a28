package httpapi

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
)

// writeCacheable answers a GET with v (200) carrying a strong ETag, the
// quoted SHA-256 of the body sent, or 304 Not Modified without a body when
// If-None-Match names that ETag: pollers send their last ETag and get
// nothing back until the answer changes. Nothing is excluded from the hash:
// a task turning orphaned, say, is a change. Cache-Control is "private,
// no-cache": clients may keep the answer but must ask again each time.
func (a *api) writeCacheable(w http.ResponseWriter, r *http.Request, v any, degraded bool) {
	body, err := marshal(v)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer body.release()
	b := body.b
	sum := sha256.Sum256(b)
	etag := `"` + base64.RawURLEncoding.EncodeToString(sum[:]) + `"`
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, no-cache")
	if degraded {
		h.Set(HeaderDegraded, "true")
	}
	if noneMatch(r.Header.Values("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// noneMatch reports whether If-None-Match header values list etag or "*"
// (weak comparison, RFC 9110 §13.1.2: W/"x" matches "x").
func noneMatch(values []string, etag string) bool {
	for _, v := range values {
		for _, tag := range strings.Split(v, ",") {
			tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
			if tag == "*" || tag == etag {
				return true
			}
		}
	}
	return false
}
