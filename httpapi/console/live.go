package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// How pages stay live: each page carries the feed cursor read before its
// data. Its script follows GET /ui/events from there — Server-Sent Events,
// or the same answer as JSON when it polls — and is told, per batch of
// feed events, which tenants and plans changed. It then asks the page's
// fragment for what it shows of those (the plan page: the counts and the
// rows of the changed tenants on the page, never the whole table) and
// swaps the server-rendered parts in. Nothing is rendered in the browser.

// changes is one batch of the feed, reduced to what pages need.
type changes struct {
	// Cursor is where the next read starts.
	Cursor  string   `json:"cursor"`
	Tenants []string `json:"tenants"`
	Plans   []string `json:"plans"`
	// Events is how many feed events the batch held.
	Events int `json:"events"`
}

// maxBatch is the most feed events one read takes.
const maxBatch = 1000

// feedFilter reads the events request's filter.
func feedFilter(r *http.Request) (task.FeedFilter, error) {
	q := r.URL.Query()
	f := task.FeedFilter{After: q.Get("after"), Limit: maxBatch, PlanID: q.Get("planId"), TenantID: q.Get("tenantId")}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		f.After = id
	}
	switch {
	case f.After == "":
		f.After = "$"
	case !task.ValidFeedCursor(f.After):
		return f, wrapInvalid("after " + task.Quote(f.After) + " is not a feed cursor")
	}
	if f.PlanID != "" && !plan.ValidID(f.PlanID) {
		return f, wrapInvalid("planId " + task.Quote(f.PlanID) + " is not a plan id")
	}
	if f.TenantID != "" && !task.ValidTenantID(f.TenantID) {
		return f, wrapInvalid("tenantId " + task.Quote(f.TenantID) + " is not a tenant id")
	}
	return f, nil
}

func reduce(evs []task.FeedEvent, next string) changes {
	ch := changes{Cursor: next, Tenants: []string{}, Plans: []string{}, Events: len(evs)}
	for _, ev := range evs {
		if ev.TenantID != "" {
			ch.Tenants = append(ch.Tenants, ev.TenantID)
		}
		if ev.PlanID != "" {
			ch.Plans = append(ch.Plans, ev.PlanID)
		}
	}
	ch.Tenants = slices.Compact(slices.Sorted(slices.Values(ch.Tenants)))
	ch.Plans = slices.Compact(slices.Sorted(slices.Values(ch.Plans)))
	return ch
}

// GET /ui/events: what changed in the feed after a cursor, as Server-Sent
// Events (Accept: text/event-stream; one "changes" event per batch, its id
// the cursor) or, for a page that polls, one JSON answer. The stream reads
// the feed every Config.PollInterval without waiting in Redis.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	f, err := feedFilter(r)
	if err != nil {
		c.jsonError(w, r, err)
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		evs, next, err := c.svc.Events(r.Context(), f, 0)
		if err != nil {
			c.jsonError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(reduce(evs, next))
		return
	}
	c.stream(w, r, f)
}

func (c *Console) jsonError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, detail, known := httpapi.Classify(err)
	if !known {
		c.log.Error().Err(err).Msg("console event read failed")
	}
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "2")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "detail": detail})
}

func (c *Console) stream(w http.ResponseWriter, r *http.Request, f task.FeedFilter) {
	if c.streams != nil {
		select {
		case c.streams <- struct{}{}:
			defer func() { <-c.streams }()
		default:
			w.Header().Set("Retry-After", "5")
			c.jsonError(w, r, fmt.Errorf("%d console event streams are open: %w", cap(c.streams), facade.ErrUnavailable))
			return
		}
	}
	httpapi.LeaveInFlight(r)
	ctx := r.Context()
	rc := http.NewResponseController(w)
	evs, next, err := c.svc.Events(ctx, f, 0)
	if err != nil {
		c.jsonError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var lastWrite time.Time
	send := func(body string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := w.Write([]byte(body)); err != nil {
			return false
		}
		lastWrite = time.Now()
		return rc.Flush() == nil
	}
	// The first message confirms the stream (and its cursor) at once.
	first := reduce(evs, next)
	if !send("retry: 3000\n\n" + changesEvent(first)) {
		return
	}
	tick := time.NewTicker(c.cfg.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.closed:
			return
		case <-tick.C:
		}
		f.After = next
		evs, next, err = c.svc.Events(ctx, f, 0)
		if err != nil {
			// The browser reconnects from its last cursor.
			c.log.Debug().Err(err).Msg("console event stream ended: feed read failed")
			return
		}
		switch {
		case len(evs) > 0:
			if !send(changesEvent(reduce(evs, next))) {
				return
			}
		case time.Since(lastWrite) >= c.cfg.KeepAlive:
			if !send(": ping\n\n") {
				return
			}
		}
	}
}

func changesEvent(ch changes) string {
	b, _ := json.Marshal(ch) // strings and ints only
	return fmt.Sprintf("id: %s\nevent: changes\ndata: %s\n\n", ch.Cursor, b)
}
