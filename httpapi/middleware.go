package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"regexp"
	"runtime/debug"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// HeaderRequestID carries the request id, in and out.
const HeaderRequestID = "X-Request-Id"

// requestIDRe is what a request id sent by a client must look like to be
// kept; anything else is replaced by a generated one.
var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

type ctxKey int

const requestIDKey ctxKey = 0

// RequestID returns the id of the request ctx belongs to ("" outside a
// request served by this package).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// withRequestID keeps a sane X-Request-Id or makes one, echoes it and puts
// it in the request context.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderRequestID)
		if !requestIDRe.MatchString(id) {
			id = newRequestID()
		}
		w.Header().Set(HeaderRequestID, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

// routePattern returns the chi route pattern that matched r ("" if none).
func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return ""
}

// accessLog writes one line per request and turns a panic into 500 INTERNAL.
func (a *api) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				a.log.Error().Str("request_id", RequestID(r.Context())).Interface("panic", p).
					Bytes("stack", debug.Stack()).Msg("handler panicked")
				if ww.Status() == 0 {
					WriteProblem(ww, r, http.StatusInternalServerError, CodeInternal, "internal error; the server logged it under the request id")
				}
			}
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK
			}
			route := routePattern(r)
			if route == "" {
				route = "unmatched"
			}
			ev := a.log.Info()
			if status >= 500 && status != statusClientClosed {
				ev = a.log.Warn()
			}
			ev.Str("method", r.Method).Str("route", route).Int("status", status).
				Dur("duration", time.Since(start)).Str("request_id", RequestID(r.Context())).Msg("request")
		}()
		next.ServeHTTP(ww, r)
	})
}

// securityHeaders sets headers every answer carries.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}
