package repository

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/jsonenc"
	"github.com/deploycoord/deploycoord/task"
)

// The Redis feed stores a batch of events as one stream entry
// (append_events.lua): fields n (events), c (the feed's running count of
// events, for trimming) and b (the events, a JSON array of feedEntryEvent).
// The entry <ms>-<seq> holds the events <ms>-<seq> .. <ms>-<seq+n-1>: an
// event's id is an ordinary stream id, the cursor format clients know, and an
// entry written before batching (fields type, at, planId, taskId, tenantId,
// data) is one event with the entry's id.
const (
	// feedEntryMax is the most events one stream entry holds: a
	// PublishEvents call with more writes several entries (one pipeline).
	// It is also how far the feed may go over Config.EventsMax.
	feedEntryMax = 100
	// feedProbeEntries is how many entries a read asks for before it has
	// seen how many events an entry holds.
	feedProbeEntries = 32
	evBatch          = "b"
	evCount          = "n"
)

// feedEntryEvent is one event of a batch entry, as stored in field b.
type feedEntryEvent struct {
	Type     string          `json:"type"`
	At       string          `json:"at"`
	PlanID   string          `json:"planId"`
	TaskID   string          `json:"taskId"`
	TenantID string          `json:"tenantId"`
	Data     json.RawMessage `json:"data"`
}

// appendFeedEntryEvent validates ev (checkFeedEvent) and appends it to b as
// a feedEntryEvent (empty fields left out), its time at.
func appendFeedEntryEvent(b []byte, i int, ev task.FeedEvent, at time.Time) ([]byte, error) {
	b = append(b, `{"type":`...)
	b = jsonenc.String(b, ev.Type)
	b = append(b, `,"at":"`...)
	b = at.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	field := func(name, v string) {
		if v != "" {
			b = append(b, name...)
			b = jsonenc.String(b, v)
		}
	}
	field(`,"planId":`, ev.PlanID)
	field(`,"taskId":`, ev.TaskID)
	field(`,"tenantId":`, ev.TenantID)
	if ev.Data != nil || ev.Of != nil {
		b = append(b, `,"data":`...)
	}
	b, err := checkFeedEvent(b, i, ev)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// PublishEvents appends events to the feed, up to feedEntryMax events a
// stream entry (append_events.lua, one call per entry, all in one pipeline:
// one round trip), trimming it to the newest Config.EventsMax events (plus
// at most one entry's worth). An event's At zero means now (Config.Clock);
// its ID is ignored (the store assigns it). Every event is validated before
// anything is sent: a bad type or id is an error wrapping task.ErrInvalid.
// After an *UnavailableError some of the entries may have been stored.
func (r *Redis) PublishEvents(ctx context.Context, evs []task.FeedEvent) error {
	if len(evs) == 0 {
		return nil
	}
	now := r.now()
	type entry struct {
		n int
		b []byte
	}
	entries := make([]entry, 0, (len(evs)+feedEntryMax-1)/feedEntryMax)
	for i, ev := range evs {
		if i%feedEntryMax == 0 {
			entries = append(entries, entry{b: make([]byte, 0, 256*min(len(evs)-i, feedEntryMax))})
		}
		e := &entries[len(entries)-1]
		if e.n == 0 {
			e.b = append(e.b, '[')
		} else {
			e.b = append(e.b, ',')
		}
		at := ev.At
		if at.IsZero() {
			at = now
		}
		var err error
		if e.b, err = appendFeedEntryEvent(e.b, i, ev, at); err != nil {
			return err
		}
		e.n++
	}
	key := r.keys.Events()
	ms := max(now.UnixMilli(), 0)
	p := r.pipeline()
	for i := range entries {
		e := &entries[i]
		e.b = append(e.b, ']')
		p.eval(ctx, appendEventsScript, []string{key}, ms, r.cfg.EventsMax, e.n, e.b)
	}
	op := fmt.Sprintf("publish %d events", len(evs))
	if err := p.exec(ctx); err != nil {
		return wrapErr(ctx, op, err)
	}
	for _, e := range p.evals {
		if err := e.cmd.Err(); err != nil {
			return wrapErr(ctx, op, err)
		}
	}
	return nil
}

// decodeFeedEntry returns the events of a stream entry: a batch entry's,
// or the one event of an entry written before batching.
func decodeFeedEntry(key string, msg redis.XMessage) ([]task.FeedEvent, error) {
	b, ok := msg.Values[evBatch].(string)
	if !ok {
		ev, err := decodeFeedEvent(key, msg)
		if err != nil {
			return nil, err
		}
		return []task.FeedEvent{ev}, nil
	}
	corrupt := func(what string, err error) error {
		return fmt.Errorf("%w: %s entry %s %s: %v", ErrCorrupt, key, msg.ID, what, err)
	}
	id, ok := parseFeedID(msg.ID)
	if !ok {
		return nil, corrupt("id", errors.New("not <ms>-<seq>"))
	}
	var raw []feedEntryEvent
	if err := json.Unmarshal([]byte(b), &raw); err != nil {
		return nil, corrupt("field b", err)
	}
	if s, _ := msg.Values[evCount].(string); s != strconv.Itoa(len(raw)) {
		return nil, corrupt("field n", fmt.Errorf("%s, but the batch holds %d events", task.Quote(s), len(raw)))
	}
	if id.seq > math.MaxUint64-uint64(len(raw)) {
		return nil, corrupt("id", errors.New("no room for its events' ids"))
	}
	out := make([]task.FeedEvent, len(raw))
	for i, e := range raw {
		ev := task.FeedEvent{ID: feedID{id.ms, id.seq + uint64(i)}.String(), Type: e.Type,
			PlanID: e.PlanID, TaskID: e.TaskID, TenantID: e.TenantID}
		at, err := time.Parse(time.RFC3339Nano, e.At)
		if err != nil {
			return nil, corrupt(fmt.Sprintf("event %d at", i), err)
		}
		ev.At = at
		if len(e.Data) > 0 && string(e.Data) != "null" {
			if err := json.Unmarshal(e.Data, &ev.Data); err != nil {
				return nil, corrupt(fmt.Sprintf("event %d data", i), err)
			}
		}
		out[i] = ev
	}
	return out, nil
}

// ReadEvents returns up to f.Limit feed events after the cursor f.After
// ("" = from the oldest kept, "$" = only events published from now on),
// oldest first, and the cursor to continue from: the id of the last event
// examined (so events a filter skipped are not examined again), or the
// starting cursor when there was none — never "" or "$".
//
// Filters (plan, tenant, type) are applied here: a filtered call examines at
// most FeedScanFactor × Limit events. With wait > 0 it blocks (XREAD BLOCK)
// until an event that matches arrives or wait has passed; the read ends
// 100ms before the context's deadline, so a deadline shorter than wait ends
// it early with what was found. A blocking read holds one connection of the
// client's pool for its whole wait: serve long polls from a client whose
// pool is sized for them (go-redis lets a blocking XREAD read for its block
// time plus 10s, whatever the client's ReadTimeout, unless the context's
// deadline is earlier).
//
// Round trips: one XREAD per chunk of entries; a cursor inside an entry's
// events is resolved by an XREVRANGE sent in the first chunk's pipeline;
// "$" costs one more (XREVRANGE); a blocking read that finds nothing at
// once sends its XREAD BLOCK after a first non-blocking chunk. Returns an
// error wrapping task.ErrInvalid for a malformed cursor or filter.
func (r *Redis) ReadEvents(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error) {
	ff, err := checkFeedFilter(f)
	if err != nil {
		return nil, "", err
	}
	const op = "read events"
	key := r.keys.Events()
	// from is the stream id XREAD reads after; cursor the event id returned.
	from, cursor := f.After, f.After
	// within: the cursor may lie inside an entry (not "", not "$").
	within := true
	switch f.After {
	case "":
		from, cursor, within = "0-0", "0-0", false
	case "$":
		within = false
		last, err := r.c.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil {
			return nil, "", wrapErr(ctx, op, err)
		}
		from, cursor = "0-0", "0-0"
		if len(last) > 0 {
			evs, err := decodeFeedEntry(key, last[0])
			if err != nil {
				return nil, "", err
			}
			from, cursor = last[0].ID, evs[len(evs)-1].ID
		}
	}
	after, _ := parseFeedID(cursor)
	until := time.Now().Add(wait)
	out := []task.FeedEvent{}
	scanned, entries := 0, 0
	// take examines the events of one entry after the cursor; it reports
	// whether the call is done (limit or budget reached).
	take := func(evs []task.FeedEvent) bool {
		for _, ev := range evs {
			id, _ := parseFeedID(ev.ID)
			if !after.less(id) {
				continue
			}
			if scanned >= ff.budget {
				return true
			}
			scanned++
			cursor, after = ev.ID, id
			if ff.match(ev) {
				out = append(out, ev)
				if len(out) == ff.limit {
					return true
				}
			}
		}
		return false
	}
	for scanned < ff.budget {
		need := ff.chunk(len(out), scanned)
		// Entries to ask for: need events at the events per entry seen so far.
		count := min(need, feedProbeEntries)
		if entries > 0 {
			count = max(1, int(math.Ceil(float64(need)*float64(entries)/float64(scanned+1))))
			count = min(count, need)
		}
		args := &redis.XReadArgs{Streams: []string{key, from}, Count: int64(count), Block: -1}
		if wait > 0 && len(out) == 0 && !within {
			if b := blockFor(ctx, until); b > 0 {
				args.Block = b
			}
		}
		var holder []redis.XMessage
		var res []redis.XStream
		if within {
			// The entry holding the cursor, read with the first chunk.
			within = false
			pp := r.c.Pipeline()
			rev := pp.XRevRangeN(ctx, key, from, "-", 1)
			read := pp.XRead(ctx, args)
			_, err = pp.Exec(ctx)
			if rev.Err() != nil {
				return nil, "", wrapErr(ctx, op, rev.Err())
			}
			holder = rev.Val()
			res, err = read.Result()
		} else {
			res, err = r.c.XRead(ctx, args).Result()
		}
		if errors.Is(err, redis.Nil) {
			err = nil
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
		for _, msg := range append(holder, msgs...) {
			evs, err := decodeFeedEntry(key, msg)
			if err != nil {
				return nil, "", err
			}
			entries++
			if take(evs) {
				return out, cursor, nil
			}
			from = msg.ID
		}
		if len(msgs) < count && args.Block <= 0 && (wait <= 0 || len(out) > 0 || blockFor(ctx, until) == 0) {
			break // the stream has no more entries, and no wait is left
		}
	}
	return out, cursor, nil
}

// decodeFeedEvent decodes an entry written before batching: one event, its
// fields the entry's.
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
