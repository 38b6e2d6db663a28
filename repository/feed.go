package repository

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Limits of the event feed.
const (
	// FeedLimitDefault is how many events ReadEvents returns when the
	// filter's Limit is 0.
	FeedLimitDefault = 100
	// FeedLimitMax is the most events one ReadEvents call returns.
	FeedLimitMax = 1000
	// FeedScanFactor bounds a filtered read: it examines at most
	// FeedScanFactor × Limit entries before it returns.
	FeedScanFactor = 10
	// blockMargin is kept between a blocking read's end and the caller's
	// deadline, so the read ends by itself rather than by a timeout.
	blockMargin = 100 * time.Millisecond
)

// Field names of a feed entry (STREAM {p}events).
const (
	evType     = "type"
	evAt       = "at"
	evPlanID   = "planId"
	evTaskID   = "taskId"
	evTenantID = "tenantId"
	evData     = "data"
)

var (
	feedCursorRe = regexp.MustCompile(`^\d{1,20}-\d{1,20}$`)
	feedTypeRe   = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)
)

// feedID is a stream entry id, <ms>-<seq>.
type feedID struct{ ms, seq uint64 }

func (id feedID) String() string {
	return strconv.FormatUint(id.ms, 10) + "-" + strconv.FormatUint(id.seq, 10)
}

func (id feedID) less(o feedID) bool { return id.ms < o.ms || (id.ms == o.ms && id.seq < o.seq) }

func parseFeedID(s string) (feedID, bool) {
	if !feedCursorRe.MatchString(s) {
		return feedID{}, false
	}
	a, b, _ := strings.Cut(s, "-")
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return feedID{ms, seq}, err1 == nil && err2 == nil
}

// checkFeedEvent validates what PublishEvents stores: the type and every id
// against their allowlists (they reach log lines and clients), data that
// encodes as JSON.
func checkFeedEvent(i int, ev task.FeedEvent) (string, error) {
	op := func() string { return fmt.Sprintf("publish events: event %d", i) }
	if !validFeedType(ev.Type) {
		return "", fmt.Errorf("%w: %s: type %s must match %s", task.ErrInvalid, op(), task.Quote(ev.Type), feedTypeRe)
	}
	if ev.PlanID != "" && !plan.ValidID(ev.PlanID) {
		return "", fmt.Errorf("%w: %s: plan id %s", task.ErrInvalid, op(), task.Quote(ev.PlanID))
	}
	if ev.TaskID != "" {
		if err := checkTaskID(ev.TaskID); err != nil {
			return "", fmt.Errorf("%s: %w", op(), err)
		}
	}
	if ev.TenantID != "" {
		if err := task.CheckTenantID(ev.TenantID); err != nil {
			return "", fmt.Errorf("%s: %w", op(), err)
		}
	}
	if ev.Data == nil {
		return "", nil
	}
	b, err := appendJSONValue(nil, ev.Data)
	if err != nil {
		return "", fmt.Errorf("%w: %s: data: %v", task.ErrInvalid, op(), err)
	}
	return string(b), nil
}

// validFeedType reports whether s matches feedTypeRe,
// ^[a-z][a-z0-9_.-]{0,63}$ (a byte loop: it runs for every event).
func validFeedType(s string) bool {
	if len(s) == 0 || len(s) > 64 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// feedFilter is a validated task.FeedFilter.
type feedFilter struct {
	task.FeedFilter
	limit int
	// budget is the most entries one call examines.
	budget int
}

func (f feedFilter) filtered() bool { return f.PlanID != "" || f.TenantID != "" || f.Type != "" }

func (f feedFilter) match(ev task.FeedEvent) bool {
	return (f.PlanID == "" || ev.PlanID == f.PlanID) &&
		(f.TenantID == "" || ev.TenantID == f.TenantID) &&
		(f.Type == "" || ev.Type == f.Type)
}

// chunk is how many entries to ask for next, with out events found and
// scanned entries examined.
func (f feedFilter) chunk(out, scanned int) int {
	if !f.filtered() {
		return f.limit - out
	}
	return min(f.budget-scanned, max(f.limit, FeedLimitDefault))
}

func checkFeedFilter(f task.FeedFilter) (feedFilter, error) {
	const op = "read events"
	if f.After != "" && f.After != "$" {
		if _, ok := parseFeedID(f.After); !ok {
			return feedFilter{}, fmt.Errorf("%w: %s: cursor %s must be \"\", \"$\" or <ms>-<seq>", task.ErrInvalid, op, task.Quote(f.After))
		}
	}
	if f.PlanID != "" && !plan.ValidID(f.PlanID) {
		return feedFilter{}, fmt.Errorf("%w: %s: plan id %s", task.ErrInvalid, op, task.Quote(f.PlanID))
	}
	if f.TenantID != "" {
		if err := task.CheckTenantID(f.TenantID); err != nil {
			return feedFilter{}, fmt.Errorf("%s: %w", op, err)
		}
	}
	if f.Type != "" && !validFeedType(f.Type) {
		return feedFilter{}, fmt.Errorf("%w: %s: type %s", task.ErrInvalid, op, task.Quote(f.Type))
	}
	out := feedFilter{FeedFilter: f, limit: f.Limit}
	switch {
	case f.Limit <= 0:
		out.limit = FeedLimitDefault
	case f.Limit > FeedLimitMax:
		out.limit = FeedLimitMax
	}
	out.budget = out.limit
	if out.filtered() {
		out.budget = FeedScanFactor * out.limit
	}
	return out, nil
}

// blockFor returns how long a read may still block: what is left of the
// wait, ending blockMargin before the context's deadline; 0 when no time is
// left.
func blockFor(ctx context.Context, until time.Time) time.Duration {
	d := time.Until(until)
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)-blockMargin)
	}
	if d < time.Millisecond {
		return 0
	}
	return d
}

// shortened reports whether ctx's deadline has passed and was set inside a
// wait that ends at until (so it, not the wait, ended the read).
func shortened(ctx context.Context, wait time.Duration, until time.Time) bool {
	dl, ok := ctx.Deadline()
	return ok && wait > 0 && dl.Before(until) && errors.Is(ctx.Err(), context.DeadlineExceeded)
}

// PublishEvents appends events to the feed with XADD MAXLEN ~
// Config.EventsMax, in one round trip (a pipeline). An event's At zero means
// now (Config.Clock); its ID is ignored (Redis assigns it). Every event is
// validated before anything is sent: a bad type or id is an error wrapping
// task.ErrInvalid. After an *UnavailableError some of the events may have
// been stored.
func (r *Redis) PublishEvents(ctx context.Context, evs []task.FeedEvent) error {
	if len(evs) == 0 {
		return nil
	}
	// The entries' values, pointed to by the commands' arguments (no
	// allocation per argument).
	type entry struct{ at, data string }
	entries := make([]entry, len(evs))
	now := r.now()
	for i, ev := range evs {
		data, err := checkFeedEvent(i, ev)
		if err != nil {
			return err
		}
		at := ev.At
		if at.IsZero() {
			at = now
		}
		entries[i] = entry{at: formatTime(at), data: data}
	}
	key := r.keys.Events()
	maxLen := int64(r.cfg.EventsMax)
	pp := r.c.Pipeline()
	for i := range evs {
		ev, e := &evs[i], &entries[i]
		pp.Do(ctx, "xadd", key, "maxlen", "~", &maxLen, "*", evType, &ev.Type, evAt, &e.at,
			evPlanID, &ev.PlanID, evTaskID, &ev.TaskID, evTenantID, &ev.TenantID, evData, &e.data)
	}
	return wrapErr(ctx, fmt.Sprintf("publish %d events", len(evs)), execAll(ctx, pp))
}

// ReadEvents returns up to f.Limit feed events after the cursor f.After
// ("" = from the oldest kept, "$" = only events published from now on),
// oldest first, and the cursor to continue from: the id of the last entry
// examined (so entries a filter skipped are not examined again), or the
// starting cursor when there was none — never "" or "$".
//
// Filters (plan, tenant, type) are applied here: a filtered call examines at
// most FeedScanFactor × Limit entries. With wait > 0 it blocks (XREAD BLOCK)
// until an event that matches arrives or wait has passed; the read ends
// 100ms before the context's deadline, so a deadline shorter than wait ends
// it early with what was found. A blocking read holds one connection of the
// client's pool for its whole wait: serve long polls from a client whose
// pool is sized for them (go-redis lets a blocking XREAD read for its block
// time plus 10s, whatever the client's ReadTimeout, unless the context's
// deadline is earlier).
//
// Round trips: one XREAD per chunk of entries (one for an unfiltered call
// that finds events; "$" costs one more, XREVRANGE, to fix the cursor).
// Returns an error wrapping task.ErrInvalid for a malformed cursor or filter.
func (r *Redis) ReadEvents(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error) {
	ff, err := checkFeedFilter(f)
	if err != nil {
		return nil, "", err
	}
	const op = "read events"
	key := r.keys.Events()
	cursor := f.After
	switch cursor {
	case "":
		cursor = "0-0"
	case "$":
		last, err := r.c.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil {
			return nil, "", wrapErr(ctx, op, err)
		}
		cursor = "0-0"
		if len(last) > 0 {
			cursor = last[0].ID
		}
	}
	until := time.Now().Add(wait)
	out := []task.FeedEvent{}
	for scanned := 0; scanned < ff.budget; {
		count := ff.chunk(len(out), scanned)
		args := &redis.XReadArgs{Streams: []string{key, cursor}, Count: int64(count), Block: -1}
		if wait > 0 && len(out) == 0 {
			if b := blockFor(ctx, until); b > 0 {
				args.Block = b
			}
		}
		res, err := r.c.XRead(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			if args.Block > 0 {
				continue // blocked without an entry: the loop ends when the wait is over
			}
			break
		}
		if err != nil {
			if shortened(ctx, wait, until) {
				// The caller's deadline, set inside the wait, ended it:
				// the margin above was eaten by a stalled process or a
				// slow reply. That is the end of the wait, not an outage.
				return out, cursor, nil
			}
			return nil, "", wrapErr(ctx, op, err)
		}
		var msgs []redis.XMessage
		if len(res) > 0 {
			msgs = res[0].Messages
		}
		for _, msg := range msgs {
			scanned++
			cursor = msg.ID
			ev, err := decodeFeedEvent(key, msg)
			if err != nil {
				return nil, "", err
			}
			if ff.match(ev) {
				out = append(out, ev)
				if len(out) == ff.limit {
					return out, cursor, nil
				}
			}
		}
		if len(msgs) < count && (wait <= 0 || len(out) > 0) {
			break // the stream has no more entries
		}
	}
	return out, cursor, nil
}

func decodeFeedEvent(key string, msg redis.XMessage) (task.FeedEvent, error) {
	str := func(f string) string { s, _ := msg.Values[f].(string); return s }
	ev := task.FeedEvent{ID: msg.ID, Type: str(evType), PlanID: str(evPlanID), TaskID: str(evTaskID), TenantID: str(evTenantID)}
	if s := str(evAt); s != "" {
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return ev, fmt.Errorf("%w: %s entry %s field at = %s: %v", ErrCorrupt, key, msg.ID, task.Quote(s), err)
		}
		ev.At = at
	}
	if s := str(evData); s != "" {
		if err := json.Unmarshal([]byte(s), &ev.Data); err != nil {
			return ev, fmt.Errorf("%w: %s entry %s field data: %v", ErrCorrupt, key, msg.ID, err)
		}
	}
	return ev, nil
}

// ---- memory ----------------------------------------------------------------

// memFeed is the memory store's event feed: a bounded ring (trimmed to
// exactly MemoryConfig.EventsMax entries) with stream-like ids and a
// broadcast channel for blocked readers.
type memFeed struct {
	events []memEvent
	last   feedID
	// notify is closed (and replaced) when events are published.
	notify chan struct{}
}

type memEvent struct {
	id feedID
	ev task.FeedEvent
}

// PublishEvents appends events to the memory feed, as the Redis store does
// (ids <ms>-<seq> from MemoryConfig.Clock, trimmed to MemoryConfig.EventsMax).
func (m *Memory) PublishEvents(_ context.Context, evs []task.FeedEvent) error {
	if len(evs) == 0 {
		return nil
	}
	copies := make([]task.FeedEvent, len(evs))
	now := m.cfg.Clock()
	for i, ev := range evs {
		if _, err := checkFeedEvent(i, ev); err != nil {
			return err
		}
		c := ev
		if c.At.IsZero() {
			c.At = now
		}
		c.At = utc(c.At)
		if ev.Data != nil {
			d, err := normalize(ev.Data)
			if err != nil {
				return fmt.Errorf("%w: publish events: event %d: data: %v", task.ErrInvalid, i, err)
			}
			c.Data = d
		}
		copies[i] = c
	}
	ms := uint64(max(now.UnixMilli(), 0))
	m.feedMu.Lock()
	defer m.feedMu.Unlock()
	f := &m.feed
	for _, c := range copies {
		id := feedID{ms: ms}
		if ms <= f.last.ms {
			id = feedID{ms: f.last.ms, seq: f.last.seq + 1}
		}
		f.last = id
		c.ID = id.String()
		f.events = append(f.events, memEvent{id: id, ev: c})
	}
	if over := len(f.events) - m.cfg.EventsMax; over > 0 {
		clear(f.events[:over])
		f.events = f.events[over:]
	}
	if f.notify != nil {
		close(f.notify)
		f.notify = nil
	}
	return nil
}

// ReadEvents reads the memory feed with the semantics of the Redis store's
// ReadEvents, blocking up to wait for a matching event.
func (m *Memory) ReadEvents(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error) {
	ff, err := checkFeedFilter(f)
	if err != nil {
		return nil, "", err
	}
	m.feedMu.Lock()
	var cursor feedID
	switch f.After {
	case "":
	case "$":
		cursor = m.feed.last
		if n := len(m.feed.events); n > 0 {
			cursor = m.feed.events[n-1].id
		}
	default:
		cursor, _ = parseFeedID(f.After)
	}
	m.feedMu.Unlock()
	until := time.Now().Add(wait)
	out := []task.FeedEvent{}
	scanned := 0
	for {
		m.feedMu.Lock()
		evs := m.feed.events
		i := sort.Search(len(evs), func(i int) bool { return cursor.less(evs[i].id) })
		for ; i < len(evs) && scanned < ff.budget; i++ {
			scanned++
			cursor = evs[i].id
			if ff.match(evs[i].ev) {
				out = append(out, copyFeedEvent(evs[i].ev))
				if len(out) == ff.limit {
					break
				}
			}
		}
		if len(out) > 0 || scanned >= ff.budget || wait <= 0 {
			m.feedMu.Unlock()
			return out, cursor.String(), nil
		}
		if m.feed.notify == nil {
			m.feed.notify = make(chan struct{})
		}
		ch := m.feed.notify
		m.feedMu.Unlock()
		d := blockFor(ctx, until)
		if d == 0 {
			return out, cursor.String(), nil
		}
		t := time.NewTimer(d)
		select {
		case <-ch:
			t.Stop()
		case <-t.C:
			return out, cursor.String(), nil
		case <-ctx.Done():
			t.Stop()
			return nil, "", fmt.Errorf("read events: %w", ctx.Err())
		}
	}
}

func copyFeedEvent(ev task.FeedEvent) task.FeedEvent {
	if ev.Data != nil {
		ev.Data, _ = normalize(ev.Data)
	}
	return ev
}
