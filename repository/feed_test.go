package repository

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// eachFeed runs f on the Redis store over miniredis and the real Redis and
// on the memory store, with cfg.EventsMax as the feed's bound.
func eachFeed(t *testing.T, eventsMax int, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			f(t, newRedisEnv(t, c, prefix, Config{EventsMax: eventsMax}))
		})
	}
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		e := newMemoryEnv(t)
		e.store = NewMemory(MemoryConfig{Clock: e.clock.Now, EventsMax: eventsMax})
		f(t, e)
	})
}

// feedEvent returns the i-th event of a test feed: tenants alternate
// t-00000, t-00001; every third is a plan event.
func feedEvent(i int, planID string) task.FeedEvent {
	ev := task.FeedEvent{Type: string(task.EventStageSucceeded), At: t0.Add(time.Duration(i) * time.Second),
		PlanID: planID, TaskID: task.NewID(t0), TenantID: tenantName(i % 2),
		Data: map[string]any{"n": float64(i), "stage": "migrate"}}
	if i%3 == 2 {
		ev = task.FeedEvent{Type: "plan.paused", At: ev.At, PlanID: planID, Data: map[string]any{"n": float64(i)}}
	}
	return ev
}

func publish(t *testing.T, e *env, evs ...task.FeedEvent) {
	t.Helper()
	if err := e.store.PublishEvents(ctxT(t), evs); err != nil {
		t.Fatalf("PublishEvents: %v", err)
	}
}

func readEvents(t *testing.T, e *env, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string) {
	t.Helper()
	evs, next, err := e.store.ReadEvents(ctxT(t), f, wait)
	if err != nil {
		t.Fatalf("ReadEvents(%+v): %v", f, err)
	}
	return evs, next
}

// ns returns the "n" data field of each event.
func ns(evs []task.FeedEvent) []int {
	out := make([]int, len(evs))
	for i, ev := range evs {
		n, _ := ev.Data["n"].(float64)
		out[i] = int(n)
	}
	return out
}

func TestFeedPublishAndRead(t *testing.T) {
	t.Parallel()
	eachFeed(t, 0, func(t *testing.T, e *env) {
		planID := plan.NewID(t0)
		want := make([]task.FeedEvent, 6)
		for i := range want {
			want[i] = feedEvent(i, planID)
		}
		if e.redis != nil {
			// The scripts load once per store: not part of the count.
			if err := e.redis.Preload(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		}
		if n := roundTrips(e, func() { publish(t, e, want...) }); n != 1 && n != -1 {
			t.Errorf("PublishEvents of 6 took %d round trips, want 1", n)
		}

		var got []task.FeedEvent
		var next string
		if n := roundTrips(e, func() { got, next = readEvents(t, e, task.FeedFilter{}, 0) }); n != 1 && n != -1 {
			t.Errorf("ReadEvents took %d round trips, want 1", n)
		}
		if len(got) != len(want) || next != got[len(got)-1].ID {
			t.Fatalf("read %d events, next %q; want %d and the last id", len(got), next, len(want))
		}
		for i := range got {
			if _, ok := parseFeedID(got[i].ID); !ok || (i > 0 && got[i].ID == got[i-1].ID) {
				t.Fatalf("event %d id %q", i, got[i].ID)
			}
			w := want[i]
			w.ID = got[i].ID
			if !reflect.DeepEqual(got[i], w) {
				t.Fatalf("event %d = %+v\nwant %+v", i, got[i], w)
			}
		}

		t.Run("NothingNew", func(t *testing.T) {
			evs, again := readEvents(t, e, task.FeedFilter{After: next}, 0)
			if len(evs) != 0 || again != next {
				t.Fatalf("read after the last: %d events, cursor %q; want none and %q", len(evs), again, next)
			}
		})
		t.Run("Pages", func(t *testing.T) {
			var pages [][]int
			cursor := ""
			for range 4 {
				evs, c := readEvents(t, e, task.FeedFilter{After: cursor, Limit: 4}, 0)
				pages = append(pages, ns(evs))
				cursor = c
			}
			if want := [][]int{{0, 1, 2, 3}, {4, 5}, {}, {}}; !reflect.DeepEqual(pages, want) || cursor != next {
				t.Fatalf("pages %v, cursor %q; want %v, %q", pages, cursor, want, next)
			}
		})
		t.Run("Filters", func(t *testing.T) {
			tests := []struct {
				name string
				f    task.FeedFilter
				want []int
			}{
				{"Tenant", task.FeedFilter{TenantID: tenantName(1)}, []int{1, 3}},
				{"Type", task.FeedFilter{Type: "plan.paused"}, []int{2, 5}},
				{"Plan", task.FeedFilter{PlanID: planID}, []int{0, 1, 2, 3, 4, 5}},
				{"OtherPlan", task.FeedFilter{PlanID: plan.NewID(t0)}, []int{}},
				{"TenantAndType", task.FeedFilter{TenantID: tenantName(0), Type: string(task.EventStageSucceeded)}, []int{0, 4}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					evs, c := readEvents(t, e, tt.f, 0)
					if !reflect.DeepEqual(ns(evs), tt.want) {
						t.Fatalf("events %v, want %v", ns(evs), tt.want)
					}
					// Everything was examined: the cursor is the last entry.
					if c != next {
						t.Fatalf("cursor %q, want the last entry scanned %q", c, next)
					}
				})
			}
		})
		t.Run("NewOnly", func(t *testing.T) {
			evs, c := readEvents(t, e, task.FeedFilter{After: "$"}, 0)
			if len(evs) != 0 || c != next {
				t.Fatalf("\"$\": %d events, cursor %q; want none and the concrete last id %q", len(evs), c, next)
			}
		})
	})
}

func TestFeedFilteredCursorSkipsScannedEntries(t *testing.T) {
	t.Parallel()
	eachFeed(t, 0, func(t *testing.T, e *env) {
		// Tenant t-00001's events are 0, 3 and 25; 22 events of t-00000 lie between.
		var evs []task.FeedEvent
		for i := range 26 {
			tenant := tenantName(0)
			if i == 0 || i == 3 || i == 25 {
				tenant = tenantName(1)
			}
			evs = append(evs, task.FeedEvent{Type: "task.started", TenantID: tenant, Data: map[string]any{"n": float64(i)}})
		}
		publish(t, e, evs...)
		all, _ := readEvents(t, e, task.FeedFilter{}, 0)
		id := func(i int) string { return all[i].ID }

		f := task.FeedFilter{TenantID: tenantName(1), Limit: 1}
		type step struct {
			events []int
			cursor string
		}
		var got []step
		for range 5 {
			evs, c := readEvents(t, e, f, 0)
			got = append(got, step{ns(evs), c})
			f.After = c
		}
		// Limit 1 scans at most FeedScanFactor (10) entries a call.
		want := []step{
			{[]int{0}, id(0)},
			{[]int{3}, id(3)},
			{[]int{}, id(13)},
			{[]int{}, id(23)},
			{[]int{25}, id(25)},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("filtered reads %+v\nwant %+v", got, want)
		}
		if evs, c := readEvents(t, e, f, 0); len(evs) != 0 || c != id(25) {
			t.Fatalf("after the end: %v, %q", ns(evs), c)
		}
	})
}

func TestFeedBlockingRead(t *testing.T) {
	t.Parallel()
	eachFeed(t, 0, func(t *testing.T, e *env) {
		publish(t, e, task.FeedEvent{Type: "task.started", TenantID: tenantName(0), Data: map[string]any{"n": 0.0}})
		_, cursor := readEvents(t, e, task.FeedFilter{}, 0)

		t.Run("ReturnsOnNewEvent", func(t *testing.T) {
			type result struct {
				evs  []task.FeedEvent
				next string
				err  error
			}
			done := make(chan result, 1)
			go func() {
				evs, next, err := e.store.ReadEvents(ctxT(t), task.FeedFilter{After: cursor, TenantID: tenantName(1)}, 20*time.Second)
				done <- result{evs, next, err}
			}()
			time.Sleep(200 * time.Millisecond)
			select {
			case r := <-done:
				t.Fatalf("the read returned before any event: %+v", r)
			default:
			}
			// One the filter skips, then one it takes.
			publish(t, e, task.FeedEvent{Type: "task.started", TenantID: tenantName(0), Data: map[string]any{"n": 1.0}})
			time.Sleep(50 * time.Millisecond)
			publish(t, e, task.FeedEvent{Type: "task.started", TenantID: tenantName(1), Data: map[string]any{"n": 2.0}})
			r := <-done
			if r.err != nil || !reflect.DeepEqual(ns(r.evs), []int{2}) || r.next != r.evs[0].ID {
				t.Fatalf("blocking read: %v %q %v; want event 2 and its id", ns(r.evs), r.next, r.err)
			}
			cursor = r.next
		})
		t.Run("TimesOut", func(t *testing.T) {
			start := time.Now()
			evs, next := readEvents(t, e, task.FeedFilter{After: cursor}, 300*time.Millisecond)
			if len(evs) != 0 || next != cursor {
				t.Fatalf("read with nothing new: %v, %q; want none and %q", ns(evs), next, cursor)
			}
			if waited := time.Since(start); waited < 250*time.Millisecond {
				t.Fatalf("returned after %s, want it to wait about 300ms", waited)
			}
		})
		t.Run("EndsBeforeTheDeadline", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			defer cancel()
			evs, next, err := e.store.ReadEvents(ctx, task.FeedFilter{After: cursor}, time.Minute)
			if err != nil || len(evs) != 0 || next != cursor {
				t.Fatalf("wait beyond the context's deadline: %v, %q, %v; want an empty answer, no error", ns(evs), next, err)
			}
		})
		t.Run("ShortDeadlineStillReads", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			evs, _, err := e.store.ReadEvents(ctx, task.FeedFilter{}, time.Minute)
			if err != nil || len(evs) == 0 {
				t.Fatalf("read with a deadline under the margin: %v, %v; want the stored events", ns(evs), err)
			}
		})
		t.Run("NewOnlyWaits", func(t *testing.T) {
			done := make(chan []task.FeedEvent, 1)
			go func() {
				evs, _, _ := e.store.ReadEvents(ctxT(t), task.FeedFilter{After: "$"}, 20*time.Second)
				done <- evs
			}()
			time.Sleep(200 * time.Millisecond)
			publish(t, e, task.FeedEvent{Type: "task.started", Data: map[string]any{"n": 3.0}})
			if evs := <-done; !reflect.DeepEqual(ns(evs), []int{3}) {
				t.Fatalf("\"$\" with wait: %v, want only the new event", ns(evs))
			}
		})
	})
}

func TestFeedTrimmed(t *testing.T) {
	t.Parallel()
	const max, published = 10, 250
	eachFeed(t, max, func(t *testing.T, e *env) {
		for b := 0; b < published; b += 50 {
			evs := make([]task.FeedEvent, 50)
			for i := range evs {
				evs[i] = task.FeedEvent{Type: "task.started", Data: map[string]any{"n": float64(b + i)}}
			}
			publish(t, e, evs...)
		}
		evs, _, err := e.store.ReadEvents(ctxT(t), task.FeedFilter{Limit: FeedLimitMax}, 0)
		if err != nil {
			t.Fatal(err)
		}
		// MAXLEN ~ trims whole stream nodes (100 entries): at least max kept,
		// at most a node more.
		got := ns(evs)
		if len(got) < max || len(got) > max+100 || got[len(got)-1] != published-1 {
			t.Fatalf("feed keeps %d events (%v…), want %d to %d ending with %d", len(got), got[:min(3, len(got))], max, max+100, published-1)
		}
		if e.counter == nil && len(got) != max {
			t.Fatalf("memory feed keeps %d, want exactly %d", len(got), max)
		}
	})
}

func TestFeedRefusesBadInput(t *testing.T) {
	t.Parallel()
	eachFeed(t, 0, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		for _, c := range []string{"abc", "1-", "-1", "1-2-3", "1", "01-x", "123456789012345678901-0", "18446744073709551616-0", " 1-0", "1-0\n"} {
			t.Run(fmt.Sprintf("Cursor%q", c), func(t *testing.T) {
				if n := roundTrips(e, func() {
					if _, _, err := e.store.ReadEvents(ctx, task.FeedFilter{After: c}, 0); !errors.Is(err, task.ErrInvalid) {
						t.Errorf("cursor %q: %v, want task.ErrInvalid", c, err)
					}
				}); n > 0 {
					t.Errorf("%d round trips, want none", n)
				}
			})
		}
		for name, f := range map[string]task.FeedFilter{
			"Tenant": {TenantID: "{t}"}, "Plan": {PlanID: "plan-1"}, "Type": {Type: "Task Started"},
		} {
			if _, _, err := e.store.ReadEvents(ctx, f, 0); !errors.Is(err, task.ErrInvalid) {
				t.Errorf("filter %s: %v, want task.ErrInvalid", name, err)
			}
		}
		good := task.FeedEvent{Type: "task.started", TenantID: tenantName(0)}
		for name, bad := range map[string]task.FeedEvent{
			"NoType":     {TenantID: tenantName(0)},
			"BadType":    {Type: "task started\n"},
			"BadTenant":  {Type: "task.started", TenantID: "t:1"},
			"BadTask":    {Type: "task.started", TaskID: "task-1"},
			"BadPlan":    {Type: "plan.paused", PlanID: "x"},
			"BadData":    {Type: "task.started", Data: map[string]any{"f": func() {}}},
			"ZeroFields": {},
		} {
			if n := roundTrips(e, func() {
				if err := e.store.PublishEvents(ctx, []task.FeedEvent{good, bad}); !errors.Is(err, task.ErrInvalid) {
					t.Errorf("%s: %v, want task.ErrInvalid", name, err)
				}
			}); n > 0 {
				t.Errorf("%s: %d round trips, want none", name, n)
			}
		}
		if evs, _ := readEvents(t, e, task.FeedFilter{}, 0); len(evs) != 0 {
			t.Fatalf("a refused batch stored %d events", len(evs))
		}
	})
}
