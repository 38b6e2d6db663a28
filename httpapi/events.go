package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog/hlog"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Limits of the event feed (GET /v1/events).
const (
	// EventsLimitMax is the largest page of events.
	EventsLimitMax = facade.EventsLimitMax
	// EventsWaitMax is the longest long-poll wait.
	EventsWaitMax = facade.EventsWaitMax
	// StreamKeepAliveDefault is how often an idle event stream gets a
	// keep-alive comment; each poll of a stream waits at most that long.
	StreamKeepAliveDefault = 15 * time.Second
	// MaxLongPollsDefault bounds the long polls waiting at once on one
	// instance: each holds a Redis connection while it waits.
	MaxLongPollsDefault = 64
	// MaxStreamsDefault bounds the event streams open at once on one
	// instance.
	MaxStreamsDefault = 64
	// LongPollChunk is the longest single blocking read of a long poll or
	// stream: a wait is served as reads of at most this long. A read
	// blocked in Redis does not notice that its client went away, so such
	// a request holds its connection for one chunk at most.
	LongPollChunk = 5 * time.Second
	// streamRetry is the reconnection delay a stream asks of its client
	// (the SSE "retry" field), in milliseconds.
	streamRetry = 2000
	// writeMargin is added to a poll's wait to make the write deadline of
	// a long poll or stream.
	writeMargin = 10 * time.Second
	// busyPause is how long a stream that found every long-poll slot taken
	// waits, holding no Redis connection, before it reads again.
	busyPause = time.Second
)

// MediaEventStream is the media type of Server-Sent Events.
const MediaEventStream = "text/event-stream"

// HeaderLastEventID is the SSE header a reconnecting client sends with the
// id of the last event it received.
const HeaderLastEventID = "Last-Event-ID"

// FeedService is what the event feed and instance routes (/v1/events,
// /v1/instances) call; *facade.Coordinator implements it. The errors each
// method returns are the contract of the error table (see Service).
type FeedService interface {
	// Events returns up to f.Limit feed events after the cursor f.After,
	// oldest first, waiting up to wait for one when there is none, and the
	// cursor to continue from. Returns ErrInvalid, ErrUnavailable (the feed
	// lives in Redis only).
	Events(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error)
	// Instances lists the coordinator instances seen recently, newest
	// first. Returns ErrUnavailable.
	Instances(ctx context.Context) ([]facade.InstanceView, error)
}

// GET /v1/instances
func (a *api) instances(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	vs, err := a.feed.Instances(r.Context())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := InstanceList{Instances: make([]Instance, len(vs))}
	for i, v := range vs {
		out.Instances[i] = instanceJSON(v)
		out.Degraded = out.Degraded || v.Degraded
	}
	a.writeJSON(w, r, http.StatusOK, out, out.Degraded)
}

// feedQuery reads the query of GET /v1/events.
func feedQuery(r *http.Request) (task.FeedFilter, time.Duration, error) {
	var f task.FeedFilter
	q, err := parseQuery(r, "after", "limit", "wait", "planId", "tenantId", "type")
	if err != nil {
		return f, 0, err
	}
	if s, ok := q.lookup("after"); ok && s != "" {
		if !task.ValidFeedCursor(s) {
			return f, 0, badRequest(fmt.Sprintf("after %s is not a feed cursor (like 1732233600000-0, or $ for new events only)", task.Quote(s)))
		}
		f.After = s
	}
	if f.Limit, err = q.limit(EventsLimitMax); err != nil {
		return f, 0, err
	}
	var wait time.Duration
	if s, ok := q.lookup("wait"); ok {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > EventsWaitMax {
			return f, 0, badRequest(fmt.Sprintf("wait %s must be a duration from 0s to %s (like 30s)", task.Quote(s), EventsWaitMax))
		}
		wait = d
	}
	if s, ok := q.lookup("planId"); ok {
		if !plan.ValidID(s) {
			return f, 0, badRequest(fmt.Sprintf("planId %s is not a plan id", task.Quote(s)))
		}
		f.PlanID = s
	}
	if s, ok := q.lookup("tenantId"); ok {
		if !task.ValidTenantID(s) {
			return f, 0, badRequest(fmt.Sprintf("tenantId %s is not a valid tenant id", task.Quote(s)))
		}
		f.TenantID = s
	}
	if s, ok := q.lookup("type"); ok {
		if !task.ValidEventType(s) {
			return f, 0, badRequest(fmt.Sprintf("type %s is not an event type (like task.failed)", task.Quote(s)))
		}
		f.Type = s
	}
	return f, wait, nil
}

// wantsStream reports whether the client asks for Server-Sent Events.
func wantsStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == MediaEventStream {
			return true
		}
	}
	return false
}

// GET /v1/events: a page of the feed (with wait, a long poll), or with
// Accept: text/event-stream the feed as Server-Sent Events.
func (a *api) events(w http.ResponseWriter, r *http.Request) {
	f, wait, err := feedQuery(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if wantsStream(r) {
		a.stream(w, r, f)
		return
	}
	if wait > 0 {
		release, ok := a.pollSlot()
		if !ok {
			writeBusy(w, r, fmt.Sprintf("the server holds %d long polls already", cap(a.polls)))
			return
		}
		defer release()
		// The server's WriteTimeout must not cut the wait short.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + writeMargin))
	}
	evs, next, err := a.poll(r.Context(), f, wait)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := Feed{Events: make([]FeedEvent, len(evs)), NextCursor: next}
	for i, ev := range evs {
		out.Events[i] = feedEventJSON(ev)
	}
	a.writeJSON(w, r, http.StatusOK, out, false)
}

// poll reads the feed after f.After, waiting up to wait for an event, in
// blocking reads of at most LongPollChunk (see there).
func (a *api) poll(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error) {
	deadline := time.Now().Add(wait)
	for left := wait; ; left = time.Until(deadline) {
		chunk := max(min(left, LongPollChunk), 0)
		start := time.Now()
		evs, next, err := a.feed.Events(ctx, f, chunk)
		switch {
		case err != nil, len(evs) > 0, chunk == 0, ctx.Err() != nil, !time.Now().Before(deadline):
			return evs, next, err
		case next == f.After && time.Since(start) < chunk/2:
			// The store did not wait (nor move on): do not spin.
			return evs, next, nil
		}
		f.After = next
	}
}

// pollSlot takes one of the Config.MaxLongPolls slots; ok is false when
// all are taken.
func (a *api) pollSlot() (release func(), ok bool) { return acquire(a.polls) }

// writeBusy answers 503 UNAVAILABLE with Retry-After: 1 for a limit that
// is reached (what says which).
func writeBusy(w http.ResponseWriter, r *http.Request, what string) {
	w.Header().Set("Retry-After", "1")
	WriteProblem(w, r, http.StatusServiceUnavailable, CodeUnavailable, what+"; retry shortly")
}

// acquire takes a token of sem, the semaphore of one of the Config limits
// (nil: no bound); ok is false when all are taken.
func acquire(sem chan struct{}) (release func(), ok bool) {
	if sem == nil {
		return func() {}, true
	}
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, true
	default:
		return nil, false
	}
}

// stream serves the feed as Server-Sent Events from f.After, or from the
// Last-Event-ID a reconnecting client sends: one SSE event per feed event
// (id: the cursor, event: the type, data: the JSON event), a ": ping"
// comment when nothing was sent for Config.StreamKeepAlive. It loops long
// polls of at most StreamKeepAlive until the client goes away. A read that
// fails once the stream started ends it; the client reconnects with
// Last-Event-ID and loses nothing.
//
// A stream holds one of the Config.MaxStreams slots for its life, and gives
// back its Config.MaxInFlight slot: open streams must not lock out the
// other requests.
func (a *api) stream(w http.ResponseWriter, r *http.Request, f task.FeedFilter) {
	if id := r.Header.Get(HeaderLastEventID); id != "" {
		if !task.ValidFeedCursor(id) {
			a.writeError(w, r, badRequest(fmt.Sprintf("%s %s is not a feed cursor", HeaderLastEventID, task.Quote(id))))
			return
		}
		f.After = id
	}
	release, ok := acquire(a.streams)
	if !ok {
		writeBusy(w, r, fmt.Sprintf("the server holds %d event streams already", cap(a.streams)))
		return
	}
	defer release()
	infoOf(r).leaveInFlight()
	ctx := r.Context()
	rc := http.NewResponseController(w)
	// The first read does not wait, so that a refusal or an unreachable
	// Redis is still answered with a status.
	evs, next, err := a.feed.Events(ctx, f, 0)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", MediaEventStream)
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	keepAlive := a.cfg.StreamKeepAlive
	var lastWrite time.Time // zero until the first send, which carries the retry field
	send := func(evs []task.FeedEvent, ping bool) error {
		_ = rc.SetWriteDeadline(time.Now().Add(writeMargin))
		var b strings.Builder
		if lastWrite.IsZero() {
			fmt.Fprintf(&b, "retry: %d\n\n", streamRetry)
		}
		for _, ev := range evs {
			data, err := json.Marshal(feedEventJSON(ev))
			if err != nil {
				return fmt.Errorf("encode event %s: %w", ev.ID, err)
			}
			fmt.Fprintf(&b, "id: %s\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, data)
		}
		if ping {
			b.WriteString(": ping\n\n")
		}
		if _, err := w.Write([]byte(b.String())); err != nil {
			return err
		}
		lastWrite = time.Now()
		return rc.Flush()
	}
	if err := send(evs, false); err != nil {
		return
	}
	log := hlog.FromRequest(r)
	for {
		f.After = next
		wait := keepAlive - time.Since(lastWrite)
		if wait <= 0 {
			if err := send(nil, true); err != nil {
				return
			}
			continue
		}
		release, ok := a.pollSlot()
		if !ok {
			wait = 0
		}
		_ = rc.SetWriteDeadline(time.Now().Add(wait + writeMargin))
		evs, next, err = a.poll(ctx, f, wait)
		if ok {
			release()
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn().Err(err).Msg("event stream ended: feed read failed")
			return
		}
		if len(evs) > 0 {
			if err := send(evs, false); err != nil {
				return
			}
			continue
		}
		if !ok && !sleepCtx(r, min(busyPause, keepAlive)) {
			return
		}
	}
}

// sleepCtx waits d or until the request ends; false when it ended.
func sleepCtx(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}
