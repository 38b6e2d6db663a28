package repository

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/internal/jsonenc"
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
// encodes as JSON: appended to dst (dst unchanged without data).
func checkFeedEvent(dst []byte, i int, ev task.FeedEvent) ([]byte, error) {
	op := func() string { return fmt.Sprintf("publish events: event %d", i) }
	if !validFeedType(ev.Type) {
		return nil, fmt.Errorf("%w: %s: type %s must match %s", task.ErrInvalid, op(), task.Quote(ev.Type), feedTypeRe)
	}
	if ev.PlanID != "" && !plan.ValidID(ev.PlanID) {
		return nil, fmt.Errorf("%w: %s: plan id %s", task.ErrInvalid, op(), task.Quote(ev.PlanID))
	}
	if ev.TaskID != "" {
		if err := checkTaskID(ev.TaskID); err != nil {
			return nil, fmt.Errorf("%s: %w", op(), err)
		}
	}
	if ev.TenantID != "" {
		if err := task.CheckTenantID(ev.TenantID); err != nil {
			return nil, fmt.Errorf("%s: %w", op(), err)
		}
	}
	data := ev.Data
	if data == nil && ev.Of != nil {
		if len(ev.Of.Data) == 0 {
			return appendEventData(dst, ev.OfStatus, ev.Of), nil
		}
		data = task.EventData(ev.OfStatus, *ev.Of)
	}
	if data == nil {
		return dst, nil
	}
	b, err := jsonenc.Value(dst, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: data: %v", task.ErrInvalid, op(), err)
	}
	return b, nil
}

// appendEventData appends the JSON of task.EventData(status, *ev) for an
// event without Data of its own — the same bytes as appendJSONValue of the
// map (its keys sorted), without building it: a task's feed events are
// the feed's most (TestAppendEventDataIsTheMaps).
func appendEventData(b []byte, status task.Status, ev *task.Event) []byte {
	sep := byte('{')
	key := func(k string) {
		b = append(b, sep)
		sep = ','
		b = append(jsonenc.String(b, k), ':')
	}
	str := func(k, v string) {
		if v != "" {
			key(k)
			b = jsonenc.String(b, v)
		}
	}
	// In the order of the keys' bytes, as appendJSONValue sorts them.
	str("actor", ev.Actor)
	key("attempt")
	b = strconv.AppendInt(b, int64(ev.Attempt), 10)
	if ev.Delay != 0 {
		str("delay", ev.Delay.D().String())
	}
	if ev.Duration != 0 {
		str("duration", ev.Duration.D().String())
	}
	if ev.Fence != 0 {
		key("fence")
		b = strconv.AppendInt(b, ev.Fence, 10)
	}
	str("instance", ev.Instance)
	str("reason", ev.Reason)
	str("requestId", ev.RequestID)
	str("role", ev.Role)
	str("stage", ev.Stage)
	if ev.StageAttempt != 0 {
		key("stageAttempt")
		b = strconv.AppendInt(b, int64(ev.StageAttempt), 10)
	}
	if ev.StageIndex != nil {
		key("stageIndex")
		b = strconv.AppendInt(b, int64(*ev.StageIndex), 10)
	}
	key("status")
	b = jsonenc.String(b, string(status))
	return append(b, '}')
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
// wait that ends at until (so it, not the wait, ended the read). It reads
// the clock, not only ctx.Err(): the socket's read deadline is the
// context's, and on a loaded machine the read's i/o timeout can be seen
// before the context's own timer has fired and set its error.
func shortened(ctx context.Context, wait time.Duration, until time.Time) bool {
	dl, ok := ctx.Deadline()
	passed := errors.Is(ctx.Err(), context.DeadlineExceeded) || !time.Now().Before(dl)
	return ok && wait > 0 && dl.Before(until) && passed
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
		if _, err := checkFeedEvent(nil, i, ev); err != nil {
			return err
		}
		c := ev
		if c.At.IsZero() {
			c.At = now
		}
		c.At = utc(c.At)
		if ev.Data == nil && ev.Of != nil {
			ev.Data = task.EventData(ev.OfStatus, *ev.Of)
		}
		c.Of, c.OfStatus = nil, ""
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
