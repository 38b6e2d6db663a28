package repository_test

import (
	"context"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// BenchmarkPublishEvents publishes the facade's largest batch (256 task
// events with the data a stage transition carries) per operation: Redis'
// commands and CPU per batch of the event feed.
func BenchmarkPublishEvents(b *testing.B) {
	e := newBenchEnv(b)
	now := time.Now()
	evs := make([]task.FeedEvent, 256)
	for i := range evs {
		evs[i] = task.FeedEvent{Type: "task.stage_succeeded", At: now, PlanID: "plan-01JD0000000000000000000000",
			TaskID: task.NewID(now), TenantID: "b-000001",
			Data: map[string]any{"status": "RUNNING", "attempt": 1, "stage": "s4", "stageIndex": 4, "instance": "bench-1"}}
	}
	ctx := context.Background()
	e.measure(b, func() {
		for range b.N {
			if err := e.store.PublishEvents(ctx, evs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}
