package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/netip"
	"regexp"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/hlog"
)

// HeaderRequestID carries the request id, in and out.
const HeaderRequestID = "X-Request-Id"

// requestIDRe is what a request id sent by a client must look like to be
// kept; anything else is replaced by a generated one.
var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// maxAuditReason bounds the reason written to the audit log, in bytes (the
// facade refuses longer ones anyway).
const maxAuditReason = 512

type ctxKey int

const infoKey ctxKey = 0

// requestInfo is what the middlewares learn about a request, for the
// handlers (the Actor), the access log and the audit log. It is made by
// withRequest and filled in by the middlewares and handlers of the request,
// all on the request's goroutine.
type requestInfo struct {
	id string
	// client is the client's address: the connection's, or the one a
	// trusted proxy forwarded (clientAddr).
	client     string
	clientAddr netip.Addr
	// actor is the token name ("anonymous" with authentication off; ""
	// when the request was not authenticated).
	actor string
	role  Role

	// audit is set for mutating /v1 requests: they are written to the
	// audit log.
	audit bool
	// denied says why the request was refused with 401, 403 or 429.
	denied string
	// reason is the "reason" of the request body; planID and tenantID
	// name the target.
	reason, planID, tenantID string
	// idemKey is the Idempotency-Key; replayed is set when the answer is
	// a stored one.
	idemKey  string
	replayed bool
	// code is the problem code of an error answer.
	code string
	// inFlight gives back the request's Config.MaxInFlight slot (nil when
	// it holds none); see leaveInFlight.
	inFlight func()
}

// leaveInFlight gives back the request's Config.MaxInFlight slot before it
// ends, for a request bounded by a limit of its own from then on (an event
// stream). It is safe to call more than once, or with no slot held.
func (info *requestInfo) leaveInFlight() {
	if info.inFlight != nil {
		info.inFlight()
	}
}

// infoOf returns the request's info (a blank one outside this package's
// router).
func infoOf(r *http.Request) *requestInfo {
	if info, ok := r.Context().Value(infoKey).(*requestInfo); ok {
		return info
	}
	return &requestInfo{}
}

// RequestID returns the id of the request ctx belongs to ("" outside a
// request served by this package).
func RequestID(ctx context.Context) string {
	if info, ok := ctx.Value(infoKey).(*requestInfo); ok {
		return info.id
	}
	return ""
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// withRequest keeps a sane X-Request-Id or makes one and echoes it, resolves
// the client address, and puts both in the request's context and logger.
func (a *api) withRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderRequestID)
		if !requestIDRe.MatchString(id) {
			id = newRequestID()
		}
		w.Header().Set(HeaderRequestID, id)
		info := &requestInfo{id: id}
		info.clientAddr = a.clientAddr(r)
		info.client = r.RemoteAddr
		if info.clientAddr.IsValid() {
			info.client = info.clientAddr.String()
		}
		zerolog.Ctx(r.Context()).UpdateContext(func(c zerolog.Context) zerolog.Context {
			return c.Str("request_id", id)
		})
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), infoKey, info)))
	})
}

// routePattern returns the chi route pattern that matched r ("" if none).
func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return ""
}

// logRequest writes the access line of a request (and its audit line, see
// audit.go) and reports it to Config.Observe; hlog.AccessHandler calls it
// once the answer is written.
func (a *api) logRequest(r *http.Request, status, size int, d time.Duration) {
	if status == 0 {
		status = http.StatusOK // the handler wrote nothing: net/http answers 200
	}
	route := routePattern(r)
	if route == "" {
		route = "unmatched"
	}
	info := infoOf(r)
	log := hlog.FromRequest(r)
	ev := log.Info()
	if status >= 500 && status != statusClientClosed {
		ev = log.Warn()
	}
	ev.Str("method", r.Method).Str("route", route).Int("status", status).Int("size", size).Dur("duration", d).
		Str("actor", info.actor).Str("client_addr", info.client).Msg("request")
	if a.cfg.Observe != nil {
		a.cfg.Observe(route, status, d)
	}
	if info.audit || info.denied != "" {
		a.auditRequest(r, info, route, status)
	}
}

// recoverPanic turns a handler's panic into 500 INTERNAL, logged once with
// its stack.
func (a *api) recoverPanic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			hlog.FromRequest(r).Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("handler panicked")
			if sw, ok := w.(interface{ Status() int }); !ok || sw.Status() == 0 {
				WriteProblem(w, r, http.StatusInternalServerError, CodeInternal, "internal error; the server logged it under the request id")
			}
		}()
		next.ServeHTTP(w, r)
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

// limitInFlight answers 503 UNAVAILABLE with Retry-After when
// Config.MaxInFlight requests are already being served. Health checks are
// exempt: a busy instance is alive, and its readiness is Redis's. An event
// stream gives its slot back once it holds one of its own limit
// (requestInfo.leaveInFlight).
func (a *api) limitInFlight(next http.Handler) http.Handler {
	if a.slots == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		release, ok := acquire(a.slots)
		if !ok {
			writeBusy(w, r, "the server is serving "+strconv.Itoa(cap(a.slots))+" requests already")
			return
		}
		info := infoOf(r)
		info.inFlight = sync.OnceFunc(release)
		defer info.leaveInFlight()
		next.ServeHTTP(w, r)
	})
}
