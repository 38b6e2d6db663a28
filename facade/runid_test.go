package facade_test

import (
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestObserveRunIDMakesLeasesSuspect: a run id other than the one seen
// last (a Redis restart or failover, seen on a new connection) holds every
// stage start for one lease; the same run id again, or "", holds nothing.
func TestObserveRunIDMakesLeasesSuspect(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	b := setup(t, redistest.Backends()[0], withConfig(func(c *facade.Config) { c.Lease = lease }))
	b.coord.ObserveRunID("run-1")
	b.coord.ObserveRunID("")
	b.coord.ObserveRunID("run-1")
	start := time.Now()
	p := b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{})}, "t-1"))
	b.waitPlan(b.coord, p.ID, plan.StatusCompleted)
	if took := time.Since(start); took > lease/2 {
		t.Fatalf("plan took %s with the run id unchanged, want no wait", took)
	}

	b.coord.ObserveRunID("run-2")
	start = time.Now()
	p = b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{})}, "t-2"))
	b.waitPlan(b.coord, p.ID, plan.StatusCompleted)
	if took := time.Since(start); took < lease-100*time.Millisecond {
		t.Fatalf("plan completed %s after the run id changed, want no stage start for one lease (%s)", took, lease)
	}
	if n := b.target.count("t-2", "push"); n != 1 {
		t.Fatalf("target saw t-2/push %d times, want once", n)
	}
}
