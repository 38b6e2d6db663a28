package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// cursorRe is what a listing cursor may look like: stores make cursors from
// ids, numbers and separators, never anything a log line could choke on.
var cursorRe = regexp.MustCompile(`^[A-Za-z0-9._~:+/=-]{1,256}$`)

func tooLargeDetail(limit int64) string {
	return fmt.Sprintf("request body is larger than %d bytes", limit)
}

// decodeJSON reads the request body, at most limit bytes, into dst: the
// Content-Type must be application/json, the body exactly one JSON object,
// and every field known to dst.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, dst any) error {
	if err := checkJSONContentType(r.Header.Get("Content-Type")); err != nil {
		return err
	}
	if r.ContentLength > limit {
		return &http.MaxBytesError{Limit: limit}
	}
	// The whole body (bounded by limit) is read first: encoding/json would
	// silently turn bytes that are not UTF-8 into U+FFFD, and a reason or a
	// name must arrive as sent or not at all.
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return readError(err)
	}
	// null, arrays and scalars would decode into a struct without complaint.
	switch start := bytes.TrimLeft(data, " \t\r\n"); {
	case len(start) == 0:
		return badRequest("request body is empty: want a JSON object")
	case start[0] != '{':
		return badRequest("request body must be a JSON object")
	}
	if !utf8.Valid(data) {
		return badRequest("request body is not valid UTF-8")
	}
	if err := checkFieldNames(data, reflect.TypeOf(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	// The body is in memory: Token fails only on what follows the value,
	// a second value or bytes that are not JSON.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("request body must hold exactly one JSON value: unexpected data after it")
	}
	return nil
}

// readError turns a failure to read the body into the error to answer.
func readError(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return err
	}
	return badRequest("cannot read the request body")
}

func checkJSONContentType(ct string) error {
	bad := &inputError{
		status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType,
		detail: "Content-Type must be application/json",
	}
	if ct == "" {
		return bad
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return bad
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return &inputError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType,
			detail: "the only charset accepted is utf-8"}
	}
	return nil
}

// decodeError describes a JSON decoding error without echoing the input
// beyond what encoding/json already quotes.
func decodeError(err error) error {
	var (
		tooBig *http.MaxBytesError
		syn    *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooBig):
		return err
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("malformed JSON: the body ends early")
	case errors.As(err, &syn):
		return badRequest(fmt.Sprintf("malformed JSON at byte %d", syn.Offset))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(body)"
		}
		return badRequest(fmt.Sprintf("field %s: want %s, not a JSON %s", task.Quote(field), typ.Type, typ.Value))
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if name, ok := strings.CutPrefix(msg, "unknown field "); ok {
		// encoding/json quotes the name with %q; cut it to a readable length.
		if uq, err := strconv.Unquote(name); err == nil {
			name = task.Quote(uq)
		}
		return badRequest("unknown field " + name)
	}
	// Errors of custom decoders (durations, stage specs) quote their input
	// with task.Quote.
	return badRequest("invalid JSON body: " + msg)
}

// Path parameter names.
const (
	paramPlanID   = "planId"
	paramTenantID = "tenantId"
	paramTaskID   = "taskId"
)

// validParam returns a middleware refusing the request with 400
// INVALID_ARGUMENT unless the path parameter name passes valid; it runs
// before the handler reads anything or calls the service.
func validParam(name, what string, valid func(string) bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v := chi.URLParam(r, name)
			if !valid(v) {
				// chi routes on the escaped path when it has one; show the
				// value the client meant.
				if u, err := url.PathUnescape(v); err == nil {
					v = u
				}
				WriteProblem(w, r, http.StatusBadRequest, CodeInvalidArgument, fmt.Sprintf("%s %s is not valid", what, task.Quote(v)))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

var (
	validPlan   = validParam(paramPlanID, "plan id", plan.ValidID)
	validTenant = validParam(paramTenantID, "tenant id", task.ValidTenantID)
	validTask   = validParam(paramTaskID, "task id", task.ValidID)
)

// query reads a request's query parameters, refusing unknown and repeated
// ones.
type query struct {
	v url.Values
}

func parseQuery(r *http.Request, allowed ...string) (query, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return query{}, badRequest("malformed query string")
	}
	for k, vals := range v {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		switch {
		case !known:
			return query{}, badRequest(fmt.Sprintf("unknown query parameter %s", task.Quote(k)))
		case len(vals) > 1:
			return query{}, badRequest(fmt.Sprintf("query parameter %s is repeated", k))
		}
	}
	return query{v: v}, nil
}

// limit returns the limit parameter (0 when absent), which must be in 1..max.
func (q query) limit(max int) (int, error) {
	s, ok := q.lookup("limit")
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		return 0, badRequest(fmt.Sprintf("limit %s must be an integer in 1..%d", task.Quote(s), max))
	}
	return n, nil
}

func (q query) cursor() (string, error) {
	s, ok := q.lookup("cursor")
	if !ok {
		return "", nil
	}
	if !cursorRe.MatchString(s) {
		return "", badRequest(fmt.Sprintf("cursor %s is not a cursor this API returned", task.Quote(s)))
	}
	return s, nil
}

func (q query) boolean(name string) (bool, error) {
	s, ok := q.lookup(name)
	switch {
	case !ok || s == "false":
		return false, nil
	case s == "true":
		return true, nil
	}
	return false, badRequest(fmt.Sprintf("%s %s must be true or false", name, task.Quote(s)))
}

func (q query) lookup(name string) (string, bool) {
	vals, ok := q.v[name]
	if !ok {
		return "", false
	}
	return vals[0], true
}
