package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog/hlog"

	"github.com/deploycoord/deploycoord/plan"
)

// Idempotency headers.
const (
	// HeaderIdempotencyKey makes a repeated POST /v1/plans, POST
	// /v1/plans/{planId}/retry or POST /v1/tenants/{tenantId}/retry answer
	// with the first answer.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderIdempotentReplayed is "true" on an answer replayed from the
	// first request with the same Idempotency-Key.
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

// MaxIdempotentAnswerBytes bounds the answer body kept for replays. A
// larger one is kept without its body, and repeats are answered 409
// IDEMPOTENCY_ANSWER_TOO_LARGE (the answers of the routes are far smaller:
// a plan without its tasks, one task, a bulk retry's tenant ids — some
// thousands of skipped tenants with their details would exceed it).
const MaxIdempotentAnswerBytes = 1 << 20

// idempotencyClaimTTL bounds how long a first request may hold its key
// before a repeat may run again: long enough for any request the server's
// write timeout lets through, short enough that a crashed instance's claim
// does not block the key for the whole IdempotencyTTL.
const idempotencyClaimTTL = 5 * time.Minute

// idempotencyFinishTimeout bounds storing or releasing a claim once the
// answer is written (the client may be gone by then).
const idempotencyFinishTimeout = 5 * time.Second

// idempotencyKeyRe is what an Idempotency-Key must look like.
var idempotencyKeyRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// IdempotencyStore keeps, per scope (the token name) and Idempotency-Key,
// the first request's claim and then its answer, as opaque byte strings:
// the API encodes them and compares request fingerprints itself. It must be
// shared by every instance (*repository.Idempotency, on Redis).
type IdempotencyStore interface {
	// Begin stores claim under (scope, key) for ttl and returns nil if the
	// key is free; otherwise it stores nothing and returns what the key
	// holds (another request's claim, or an answer stored by Complete).
	Begin(ctx context.Context, scope, key string, claim []byte, ttl time.Duration) ([]byte, error)
	// Complete replaces claim by answer, kept for ttl, if the key still
	// holds claim; else it returns an error and writes nothing.
	Complete(ctx context.Context, scope, key string, claim, answer []byte, ttl time.Duration) error
	// Abandon deletes the key if it still holds claim, so a repeat runs.
	Abandon(ctx context.Context, scope, key string, claim []byte) error
}

// idemRecord is what the store keeps for a key: the claim of a running
// request, or a finished request's answer (its body follows the JSON line).
type idemRecord struct {
	// State is "running" (a claim) or "done" (an answer).
	State string `json:"state"`
	// Fingerprint is the hex SHA-256 of the request (fingerprint).
	Fingerprint string `json:"fingerprint"`
	// Claim makes every claim unique, so only its request completes it.
	Claim     string    `json:"claim,omitempty"`
	RequestID string    `json:"requestId"`
	At        time.Time `json:"at"`

	Status      int    `json:"status,omitempty"`
	ContentType string `json:"contentType,omitempty"`
	Location    string `json:"location,omitempty"`
	Degraded    bool   `json:"degraded,omitempty"`
	// TooLarge is set when the body was over MaxIdempotentAnswerBytes and
	// not kept.
	TooLarge bool `json:"tooLarge,omitempty"`
}

const (
	idemRunning = "running"
	idemDone    = "done"
)

func (rec idemRecord) encode(body []byte) []byte {
	b, _ := json.Marshal(rec) // cannot fail: strings, ints, bools, a time
	return append(append(b, '\n'), body...)
}

func decodeIdemRecord(v []byte) (idemRecord, []byte, error) {
	head, body, _ := bytes.Cut(v, []byte{'\n'})
	var rec idemRecord
	if err := json.Unmarshal(head, &rec); err != nil {
		return rec, nil, fmt.Errorf("stored idempotency record: %w", err)
	}
	if rec.State != idemRunning && rec.State != idemDone {
		return rec, nil, fmt.Errorf("stored idempotency record: state %q", rec.State)
	}
	return rec, body, nil
}

// fingerprint is the hex SHA-256 of what makes two requests the same: the
// method, the route, the path parameters and the body with insignificant
// white space removed (json.Compact; member order counts). A body that is
// not JSON counts as sent.
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", r.Method, routePattern(r))
	if rc := chi.RouteContext(r.Context()); rc != nil {
		for i, k := range rc.URLParams.Keys {
			fmt.Fprintf(h, "%s=%s\x00", k, rc.URLParams.Values[i])
		}
	}
	var compact bytes.Buffer
	if json.Compact(&compact, body) == nil {
		body = compact.Bytes()
	}
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// idempotent returns a middleware making a request that carries an
// Idempotency-Key idempotent: the first request with a key (per token) runs
// and its answer — 2xx or 4xx — is kept for Config.IdempotencyTTL; a repeat
// gets that answer with Idempotent-Replayed: true and does nothing else. A
// repeat with another method, route, path or body is answered 409
// IDEMPOTENCY_KEY_REUSED; one sent while the first still runs 409
// IDEMPOTENCY_IN_PROGRESS with Retry-After (it does not wait). A 5xx answer
// (or a client gone before the answer) releases the key, so a repeat runs
// again. maxBody is the route's body limit: a larger body is left to the
// handler, which refuses it.
func (a *api) idempotent(maxBody int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			keys := r.Header.Values(HeaderIdempotencyKey)
			if len(keys) == 0 {
				next.ServeHTTP(w, r)
				return
			}
			if len(keys) > 1 || !idempotencyKeyRe.MatchString(keys[0]) {
				WriteProblem(w, r, http.StatusBadRequest, CodeInvalidArgument,
					"Idempotency-Key must be one value of 1 to 128 characters among A-Z a-z 0-9 . _ : -")
				return
			}
			if a.cfg.Idempotency == nil {
				next.ServeHTTP(w, r)
				return
			}
			key := keys[0]
			infoOf(r).idemKey = key
			if r.ContentLength > maxBody {
				next.ServeHTTP(w, r) // answered 413; nothing to keep
				return
			}
			body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
			if err != nil {
				a.writeError(w, r, badRequest("cannot read the request body"))
				return
			}
			if int64(len(body)) > maxBody {
				r.Body = struct {
					io.Reader
					io.Closer
				}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
				next.ServeHTTP(w, r) // answered 413; nothing to keep
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			a.serveIdempotent(w, r, next, key, fingerprint(r, body))
		})
	}
}

func (a *api) serveIdempotent(w http.ResponseWriter, r *http.Request, next http.Handler, key, fp string) {
	info := infoOf(r)
	scope := info.actor
	claim := idemRecord{State: idemRunning, Fingerprint: fp, Claim: newRequestID(), RequestID: info.id, At: time.Now().UTC()}.encode(nil)
	held, err := a.cfg.Idempotency.Begin(r.Context(), scope, key, claim, min(idempotencyClaimTTL, a.cfg.IdempotencyTTL))
	if err != nil {
		a.writeError(w, r, fmt.Errorf("idempotency key %s: %w", key, err))
		return
	}
	if held != nil {
		a.replay(w, r, key, fp, held)
		return
	}

	cw := &captureWriter{ResponseWriter: w}
	finished := false
	defer func() {
		// A panic (or a handler that answered 5xx) leaves nothing to keep:
		// release the key so a repeat runs again.
		if finished {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), idempotencyFinishTimeout)
		defer cancel()
		if err := a.cfg.Idempotency.Abandon(ctx, scope, key, claim); err != nil {
			hlog.FromRequest(r).Warn().Err(err).Str("idempotency_key", key).Msg("idempotency key not released")
		}
	}()
	next.ServeHTTP(cw, r)

	status := cw.status
	if status == 0 {
		status = http.StatusOK
	}
	if !(status >= 200 && status < 300 || status >= 400 && status < 500 && status != statusClientClosed) {
		return // the deferred Abandon releases the key
	}
	finished = true
	h := cw.Header()
	done := idemRecord{
		State: idemDone, Fingerprint: fp, RequestID: info.id, At: time.Now().UTC(), Status: status,
		ContentType: h.Get("Content-Type"), Location: h.Get("Location"), Degraded: h.Get(HeaderDegraded) == "true",
		TooLarge: cw.tooLarge,
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), idempotencyFinishTimeout)
	defer cancel()
	if err := a.cfg.Idempotency.Complete(ctx, scope, key, claim, done.encode(cw.body.Bytes()), a.cfg.IdempotencyTTL); err != nil {
		hlog.FromRequest(r).Warn().Err(err).Str("idempotency_key", key).Int("status", status).
			Msg("answer not kept for Idempotency-Key repeats")
	}
}

// replay answers a repeat from what the key holds.
func (a *api) replay(w http.ResponseWriter, r *http.Request, key, fp string, held []byte) {
	rec, body, err := decodeIdemRecord(held)
	if err != nil {
		a.writeError(w, r, fmt.Errorf("idempotency key %s: %w", key, err))
		return
	}
	switch {
	case rec.Fingerprint != fp:
		WriteProblem(w, r, http.StatusConflict, CodeIdempotencyKeyReused, fmt.Sprintf(
			"Idempotency-Key %s was used at %s (request %s) for a different request (method, path or body); use a new key",
			key, rec.At.Format(time.RFC3339), rec.RequestID))
	case rec.State == idemRunning:
		w.Header().Set("Retry-After", "1")
		WriteProblem(w, r, http.StatusConflict, CodeIdempotencyInProgress, fmt.Sprintf(
			"the first request with Idempotency-Key %s (request %s) is still being served; repeat it later for its answer",
			key, rec.RequestID))
	case rec.TooLarge:
		WriteProblem(w, r, http.StatusConflict, CodeIdempotencyAnswerTooLarge, fmt.Sprintf(
			"the first request with Idempotency-Key %s (request %s) was answered %d, but its answer was too large to keep",
			key, rec.RequestID, rec.Status))
	default:
		info := infoOf(r)
		info.replayed = true
		if id, ok := strings.CutPrefix(rec.Location, "/v1/plans/"); ok && plan.ValidID(id) {
			info.planID = id
		}
		h := w.Header()
		h.Set(HeaderIdempotentReplayed, "true")
		if rec.ContentType != "" {
			h.Set("Content-Type", rec.ContentType)
		}
		if rec.Location != "" {
			h.Set("Location", rec.Location)
		}
		if rec.Degraded {
			h.Set(HeaderDegraded, "true")
		}
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.Status)
		_, _ = w.Write(body)
	}
}

// captureWriter passes an answer through and keeps its status and up to
// MaxIdempotentAnswerBytes of its body.
type captureWriter struct {
	http.ResponseWriter
	status   int
	body     bytes.Buffer
	tooLarge bool
}

func (c *captureWriter) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if !c.tooLarge {
		if c.body.Len()+len(b) > MaxIdempotentAnswerBytes {
			c.tooLarge = true
			c.body = bytes.Buffer{}
		} else {
			c.body.Write(b)
		}
	}
	return c.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (c *captureWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
