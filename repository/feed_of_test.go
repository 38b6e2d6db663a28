package repository

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/jsonenc"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// randomEvent returns a task event with a random subset of its fields set,
// strings from a set that needs escaping (quotes, control characters,
// invalid UTF-8, <>&, non-ASCII).
func randomEvent(r *rand.Rand) task.Event {
	strs := []string{"", "migrate", "a\"b\\c", "ctrl\x01\n\t", "bad\xff\xfeutf8", "<script>&amp;", "héllo ✓", "{braces}:colon*glob"}
	pick := func() string { return strs[r.IntN(len(strs))] }
	ev := task.Event{At: time.Unix(int64(r.IntN(1<<31)), 0), Type: task.EventStageSucceeded,
		Stage: pick(), Reason: pick(), Actor: pick(), Role: pick(), RequestID: pick(), Instance: pick()}
	if r.IntN(2) == 0 {
		i := r.IntN(20) - 2
		ev.StageIndex = &i
	}
	if r.IntN(2) == 0 {
		ev.Attempt = r.IntN(5)
	}
	if r.IntN(2) == 0 {
		ev.StageAttempt = r.IntN(4)
	}
	if r.IntN(2) == 0 {
		ev.Delay = task.Duration(time.Duration(r.Int64N(int64(time.Hour))))
	}
	if r.IntN(2) == 0 {
		ev.Duration = task.Duration(time.Duration(r.Int64N(int64(time.Minute))))
	}
	if r.IntN(2) == 0 {
		ev.Fence = r.Int64N(1 << 53)
	}
	return ev
}

// TestAppendEventDataIsTheMaps: the feed data a store writes from a task
// event (appendEventData) is byte for byte the JSON of task.EventData's
// map, for events with every subset of fields set.
func TestAppendEventDataIsTheMaps(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	statuses := []task.Status{task.StatusPending, task.StatusRunning, task.StatusCompleted, task.StatusFailed, ""}
	for i := range 5000 {
		ev := randomEvent(r)
		st := statuses[i%len(statuses)]
		want, err := jsonenc.Value(nil, task.EventData(st, ev))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendEventData(nil, st, &ev); string(got) != string(want) {
			t.Fatalf("event %+v status %q:\n got %s\nwant %s", ev, st, got, want)
		}
	}
}

// TestFeedEventOf: a feed event published with Of (the task event) reads
// back, from Redis and from memory, as one published with Data =
// task.EventData — also when the task event has data of its own.
func TestFeedEventOf(t *testing.T) {
	t.Parallel()
	eachFeed(t, 0, func(t *testing.T, e *env) {
		planID := plan.NewID(t0)
		r := rand.New(rand.NewPCG(3, 4))
		var withOf, withData []task.FeedEvent
		for i := range 20 {
			ev := randomEvent(r)
			if i%5 == 0 {
				ev.Data = map[string]any{"queued": true, "status": "shadowed", "n": float64(i)}
			}
			base := task.FeedEvent{Type: string(task.EventStageSucceeded), At: t0.Add(time.Duration(i) * time.Second),
				PlanID: planID, TaskID: task.NewID(t0), TenantID: tenantName(i % 3)}
			a, b := base, base
			a.Of, a.OfStatus = &ev, task.StatusRunning
			b.Data = task.EventData(task.StatusRunning, ev)
			withOf, withData = append(withOf, a), append(withData, b)
		}
		publish(t, e, withOf...)
		publish(t, e, withData...)
		got, _ := readEvents(t, e, task.FeedFilter{Limit: 100}, 0)
		if len(got) != 40 {
			t.Fatalf("read %d events, want 40", len(got))
		}
		for i := range 20 {
			a, b := got[i], got[20+i]
			a.ID, b.ID = "", ""
			if a.Of != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("event %d published with Of reads back as\n%+v\nwith Data as\n%+v", i, a, b)
			}
		}
	})
}
