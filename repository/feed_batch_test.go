package repository

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// eachRedisFeed runs f on the Redis store over every backend, with
// cfg.EventsMax as the feed's bound.
func eachRedisFeed(t *testing.T, eventsMax int, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			f(t, newRedisEnv(t, c, prefix, Config{EventsMax: eventsMax}))
		})
	}
}

func numbered(from, n int) []task.FeedEvent {
	evs := make([]task.FeedEvent, n)
	for i := range evs {
		evs[i] = task.FeedEvent{Type: "task.started", TenantID: tenantName(i % 3), Data: map[string]any{"n": float64(from + i)}}
	}
	return evs
}

func seq(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// A batch is stored as entries of at most feedEntryMax events, each event
// with a stream id of its own, increasing across entries and batches (the
// test clock stands still: every entry is in the same millisecond).
func TestFeedBatchEntries(t *testing.T) {
	t.Parallel()
	eachRedisFeed(t, 0, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		publish(t, e, numbered(0, 250)...)
		publish(t, e, numbered(250, 3)...)
		publish(t, e, numbered(253, 1)...)
		if n := e.client.XLen(ctx, e.redis.Keys().Events()).Val(); n != 5 {
			t.Fatalf("stream holds %d entries, want 5 (100 + 100 + 50, 3, 1)", n)
		}
		var all []task.FeedEvent
		cursor := ""
		for {
			evs, next := readEvents(t, e, task.FeedFilter{After: cursor, Limit: 7}, 0)
			all = append(all, evs...)
			if len(evs) == 0 {
				if next != cursor {
					t.Fatalf("empty page moved the cursor %q -> %q", cursor, next)
				}
				break
			}
			if next != evs[len(evs)-1].ID {
				t.Fatalf("cursor %q, want the last event's id %q", next, evs[len(evs)-1].ID)
			}
			cursor = next
		}
		if got := ns(all); !reflect.DeepEqual(got, seq(0, 254)) {
			t.Fatalf("pages of 7 read %v", got)
		}
		prev := feedID{}
		for i, ev := range all {
			id, ok := parseFeedID(ev.ID)
			if !ok || !prev.less(id) {
				t.Fatalf("event %d id %q after %s", i, ev.ID, prev)
			}
			prev = id
		}
		// Any event's id is a cursor: the read goes on right after it.
		for _, i := range []int{0, 42, 99, 100, 249, 250, 252} {
			evs, _ := readEvents(t, e, task.FeedFilter{After: all[i].ID, Limit: 3}, 0)
			if got := ns(evs); !reflect.DeepEqual(got, seq(i+1, min(3, 253-i))) {
				t.Errorf("after event %d (%s): %v", i, all[i].ID, got)
			}
		}
		// "$" is the last event.
		if _, c := readEvents(t, e, task.FeedFilter{After: "$"}, 0); c != all[253].ID {
			t.Errorf("\"$\" = %q, want %q", c, all[253].ID)
		}
	})
}

// The feed keeps at least EventsMax events and at most one entry's worth
// more, whatever the batch sizes.
func TestFeedBatchTrim(t *testing.T) {
	t.Parallel()
	const max = 10
	eachRedisFeed(t, max, func(t *testing.T, e *env) {
		next := 0
		check := func(what string) {
			t.Helper()
			evs, _, err := e.store.ReadEvents(ctxT(t), task.FeedFilter{Limit: FeedLimitMax}, 0)
			if err != nil {
				t.Fatal(err)
			}
			got := ns(evs)
			if len(got) < min(max, next) || len(got) > max+feedEntryMax-1 || !reflect.DeepEqual(got, seq(next-len(got), len(got))) {
				t.Fatalf("%s: feed keeps %v, want the newest %d at least", what, got, max)
			}
		}
		for range 25 {
			publish(t, e, numbered(next, 1)...)
			next++
		}
		check("singles")
		if evs, _ := readEvents(t, e, task.FeedFilter{Limit: FeedLimitMax}, 0); len(evs) != max {
			t.Fatalf("singles: %d kept, want exactly %d", len(evs), max)
		}
		publish(t, e, numbered(next, 60)...)
		next += 60
		check("a batch of 60")
		for range 3 {
			publish(t, e, numbered(next, 4)...)
			next += 4
			check("batches of 4")
		}
		publish(t, e, numbered(next, 1)...)
		next++
		// 60 | 4 4 4 1: the batch of 60 lies wholly beyond the newest 10.
		if evs, _ := readEvents(t, e, task.FeedFilter{Limit: FeedLimitMax}, 0); len(evs) != 13 {
			t.Fatalf("kept %v, want the last 13 (entries 4 4 4 1)", ns(evs))
		}
	})
}

// Entries written before batching (one event each, its fields the entry's)
// read as before, between batch entries.
func TestFeedReadsUnbatchedEntries(t *testing.T) {
	t.Parallel()
	eachRedisFeed(t, 0, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		key := e.redis.Keys().Events()
		old := func(n int) {
			t.Helper()
			err := e.client.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{
				evType, "task.started", evAt, "2026-11-01T10:00:00Z", evPlanID, "", evTaskID, "", evTenantID, tenantName(0),
				evData, fmt.Sprintf(`{"n":%d}`, n)}}).Err()
			if err != nil {
				t.Fatal(err)
			}
		}
		old(0)
		old(1)
		publish(t, e, numbered(2, 3)...)
		if got := ns(mustRead(t, e, "")); !reflect.DeepEqual(got, seq(0, 5)) {
			t.Fatalf("read %v", got)
		}
		all := mustRead(t, e, "")
		if got := ns(mustRead(t, e, all[1].ID)); !reflect.DeepEqual(got, seq(2, 3)) {
			t.Fatalf("after the second old entry: %v", got)
		}
	})
}

func mustRead(t *testing.T, e *env, after string) []task.FeedEvent {
	t.Helper()
	evs, _ := readEvents(t, e, task.FeedFilter{After: after, Limit: FeedLimitMax}, 0)
	return evs
}

// A batch entry that does not decode is ErrCorrupt naming the key, not a
// panic or a silent skip.
func TestFeedCorruptBatch(t *testing.T) {
	t.Parallel()
	eachRedisFeed(t, 0, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		key := e.redis.Keys().Events()
		for i, vals := range [][]any{
			{evCount, "2", evBatch, `[{"type":"task.started","at":"2026-11-01T10:00:00Z"}]`},
			{evCount, "1", evBatch, `{"type":`},
			{evCount, "1", evBatch, `[{"type":"task.started","at":"yesterday"}]`},
			{evCount, "1", evBatch, `[{"type":"task.started","at":"2026-11-01T10:00:00Z","data":[1]}]`},
		} {
			if err := e.client.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.client.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: vals}).Err(); err != nil {
				t.Fatal(err)
			}
			_, _, err := e.store.ReadEvents(ctx, task.FeedFilter{}, 0)
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("entry %d: %v, want ErrCorrupt", i, err)
			}
		}
	})
}
