package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/rs/zerolog/hlog"

	"github.com/deploycoord/deploycoord/facade"
)

// Stable error codes of problem answers (docs/api.md). Clients branch on these,
// never on the detail text.
const (
	CodeInvalidArgument      = "INVALID_ARGUMENT"
	CodeUnauthenticated      = "UNAUTHENTICATED"
	CodePermissionDenied     = "PERMISSION_DENIED"
	CodeNotFound             = "NOT_FOUND"
	CodeMethodNotAllowed     = "METHOD_NOT_ALLOWED"
	CodeTaskRunning          = "TASK_RUNNING"
	CodeTaskCompleted        = "TASK_COMPLETED"
	CodeTaskPending          = "TASK_PENDING"
	CodeAttemptMismatch      = "ATTEMPT_MISMATCH"
	CodePlanFinished         = "PLAN_FINISHED"
	CodeInvalidState         = "INVALID_STATE"
	CodeLockMismatch         = "LOCK_MISMATCH"
	CodeTenantLocked         = "TENANT_LOCKED"
	CodePayloadTooLarge      = "PAYLOAD_TOO_LARGE"
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	CodeUnavailable          = "UNAVAILABLE"
	CodeInternal             = "INTERNAL"
	// CodeRateLimited (429): the token sent too many changes; see
	// Retry-After.
	CodeRateLimited = "RATE_LIMITED"
	// CodeIdempotencyKeyReused (409): the Idempotency-Key was used for a
	// different request.
	CodeIdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED"
	// CodeIdempotencyInProgress (409): the first request with the
	// Idempotency-Key is still being served; see Retry-After.
	CodeIdempotencyInProgress = "IDEMPOTENCY_IN_PROGRESS"
	// CodeIdempotencyAnswerTooLarge (409): the first request's answer was
	// too large to keep for replays.
	CodeIdempotencyAnswerTooLarge = "IDEMPOTENCY_ANSWER_TOO_LARGE"
)

// errorTable is the one mapping of facade errors to HTTP statuses and codes.
// The facade guarantees an error matches at most one sentinel; the first
// match wins.
var errorTable = []struct {
	err    error
	status int
	code   string
}{
	{facade.ErrInvalid, http.StatusBadRequest, CodeInvalidArgument},
	{facade.ErrNotFound, http.StatusNotFound, CodeNotFound},
	{facade.ErrTaskRunning, http.StatusConflict, CodeTaskRunning},
	{facade.ErrTaskCompleted, http.StatusConflict, CodeTaskCompleted},
	{facade.ErrTaskPending, http.StatusConflict, CodeTaskPending},
	{facade.ErrAttemptMismatch, http.StatusConflict, CodeAttemptMismatch},
	{facade.ErrPlanFinished, http.StatusConflict, CodePlanFinished},
	{facade.ErrInvalidState, http.StatusConflict, CodeInvalidState},
	{facade.ErrLockMismatch, http.StatusConflict, CodeLockMismatch},
	{facade.ErrTenantLocked, http.StatusConflict, CodeTenantLocked},
	{facade.ErrUnavailable, http.StatusServiceUnavailable, CodeUnavailable},
	{facade.ErrShuttingDown, http.StatusServiceUnavailable, CodeUnavailable},
}

// statusClientClosed is logged (and written, to nobody) when the client went
// away before the answer was ready (nginx's convention).
const statusClientClosed = 499

// maxDetailLen bounds the detail of a problem answer, in bytes.
const maxDetailLen = 2000

// Problem is an error answer (RFC 9457, media type application/problem+json).
type Problem struct {
	// Type is always "about:blank": Title is the status text.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Code is the stable error code (the Code* constants).
	Code   string `json:"code"`
	Detail string `json:"detail"`
	// RequestID is the request's id (also in the X-Request-Id header).
	RequestID string `json:"requestId,omitempty"`
}

// inputError is a request the API itself refuses before calling the service.
type inputError struct {
	status int
	code   string
	detail string
}

func (e *inputError) Error() string { return e.detail }

func badRequest(detail string) error {
	return &inputError{status: http.StatusBadRequest, code: CodeInvalidArgument, detail: detail}
}

// WriteProblem writes a problem answer with status, code and detail; for
// middlewares plugged in through Config.Middlewares (auth, rate limits), so
// every error of the API has the same shape. A HEAD request gets the headers
// only.
func WriteProblem(w http.ResponseWriter, r *http.Request, status int, code, detail string) {
	p := newProblem(r, status, code, detail)
	writeProblem(w, r, p, p)
}

// newProblem returns the problem answering r with status, code and detail
// (cut to maxDetailLen bytes, made valid UTF-8).
func newProblem(r *http.Request, status int, code, detail string) Problem {
	if len(detail) > maxDetailLen {
		detail = detail[:maxDetailLen] + "…"
	}
	return Problem{
		Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code,
		Detail: strings.ToValidUTF8(detail, string(utf8.RuneError)), RequestID: RequestID(r.Context()),
	}
}

// writeProblem answers p; body is p itself, or a struct embedding p that
// adds members (RFC 9457 extensions, like the checks of GET /readyz).
func writeProblem(w http.ResponseWriter, r *http.Request, p Problem, body any) {
	infoOf(r).code = p.Code
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(p.Status)
	if r.Method == http.MethodHead {
		return
	}
	b, _ := json.Marshal(body) // cannot fail: the bodies hold strings, numbers and bools
	_, _ = w.Write(append(b, '\n'))
}

// Classify returns the status, stable code and detail the API answers err
// with: the one table of errors.go, for handlers of Config.Mounts that
// answer in another form (the web console's pages). known is false for an
// error to log: one nobody expected, answered 500 INTERNAL with a generic
// detail, or a stored record that does not decode (facade.IsMalformed),
// answered 500 INTERNAL with a detail naming its key and field.
func Classify(err error) (status int, code, detail string, known bool) { return classify(err) }

// classify returns the status, code and detail answering err. Unknown errors
// get a generic detail; known is false for them, and for a malformed stored
// record, so the caller logs them.
func classify(err error) (status int, code, detail string, known bool) {
	var in *inputError
	if errors.As(err, &in) {
		return in.status, in.code, in.detail, true
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return http.StatusRequestEntityTooLarge, CodePayloadTooLarge, tooLargeDetail(tooBig.Limit), true
	}
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.status, e.code, err.Error(), true
		}
	}
	if facade.IsUnavailable(err) {
		return http.StatusServiceUnavailable, CodeUnavailable, "storage unavailable", true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusServiceUnavailable, CodeUnavailable, "the request timed out", true
	}
	if facade.IsMalformed(err) {
		// Not a bug of the request: a stored record that someone must fix.
		// The detail names its key and field (as the log does), so that the
		// operator who asked finds it without the server's log.
		return http.StatusInternalServerError, CodeInternal, err.Error() + malformedHint, false
	}
	return http.StatusInternalServerError, CodeInternal, "internal error; the server logged it under the request id", false
}

// malformedHint ends the detail of a malformed stored record.
const malformedHint = ` (a stored record that does not decode: fix or delete the field named, see the runbook's "A malformed record")`

// writeError answers err: a problem per the error table, nothing when the
// client is gone, 500 INTERNAL (logged once, with the request id) for an
// error nobody expected.
func (a *api) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		hlog.FromRequest(r).Debug().Err(err).Msg("client went away")
		w.WriteHeader(statusClientClosed)
		return
	}
	status, code, detail, known := classify(err)
	if !known {
		hlog.FromRequest(r).Error().Str("method", r.Method).Str("route", routePattern(r)).Err(err).Msg("request failed")
	}
	WriteProblem(w, r, status, code, detail)
}
