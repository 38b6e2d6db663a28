package facade_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// bulkTenants is the size of the plans of the bulk round-trip tests.
const bulkTenants = 1000

// feedCount counts the feed's events of type typ about plan planID.
func feedCount(t *testing.T, c *facade.Coordinator, planID string, typ task.EventType) int {
	t.Helper()
	n, after := 0, ""
	for {
		evs, next, err := c.Events(context.Background(), task.FeedFilter{After: after, Limit: facade.EventsLimitMax, PlanID: planID, Type: string(typ)}, 0)
		if err != nil {
			t.Fatal(err)
		}
		n += len(evs)
		if len(evs) == 0 || next == "" || next == after {
			return n
		}
		after = next
	}
}

// checkRecount: the plan's counts equal a recount of its task records.
func checkRecount(t *testing.T, b *bundle, planID string) plan.Counts {
	t.Helper()
	ctx := context.Background()
	_, before, err := b.store.Plan(ctx, planID)
	if err != nil {
		t.Fatal(err)
	}
	after, changed, err := b.store.RepairCounts(ctx, planID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []task.Status{task.StatusPending, task.StatusRunning, task.StatusPaused, task.StatusFailed, task.StatusCompleted, task.StatusCancelled} {
		if before[s] != after[s] {
			t.Errorf("plan counts %v, a recount says %v", before, after)
			break
		}
	}
	if changed {
		t.Errorf("the recount changed the plan's status")
	}
	return after
}

// TestCancelPlanRoundTrips: cancelling a plan of 1 000 PENDING tasks takes
// far fewer round trips than one per task (it took 1.08 per task, one
// write after the other: 9.5 s for 50 000 tasks), and still cancels every
// task with its timeline entries, feed events and exact counts.
func TestCancelPlanRoundTrips(t *testing.T) {
	t.Parallel()
	own := &ownCounter{}
	b := setup(t, withHook(redistest.Backends()[1], own), sharedMode)
	ctx := context.Background()
	tenants := make([]string, bulkTenants)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("bc-%04d", i)
	}
	s := spec(threeNoops(), tenants...)
	no := false
	s.Start = &no
	v := b.create(s)
	var (
		err  error
		mine int64
	)
	n := b.counter.Count(func() {
		mine = own.count(func(ctx context.Context) { _, err = b.coord.CancelPlan(ctx, v.ID, "INC-12 stop it", anyone) })
	})
	if err != nil {
		t.Fatal(err)
	}
	// Only the cancel's own round trips are budgeted (see
	// TestRetryPlanRoundTrips); it made 1.0 a task (1.1–1.33 counting the
	// whole process).
	t.Logf("cancel of %d tasks: %d round trips of its own, %d in all", bulkTenants, mine, n)
	if budget := int64(bulkTenants / 4); mine > budget {
		t.Errorf("cancel of %d PENDING tasks: %d round trips, want at most %d", bulkTenants, mine, budget)
	}
	pv := b.waitPlan(b.coord, v.ID, plan.StatusCancelled)
	if pv.Counts[task.StatusCancelled] != bulkTenants {
		t.Fatalf("counts after the cancel: %v", pv.Counts)
	}
	if c := checkRecount(t, b, v.ID); c[task.StatusCancelled] != bulkTenants {
		t.Fatalf("recount after the cancel: %v", c)
	}
	tl, err := b.coord.Timeline(ctx, tenants[bulkTenants-1], 0)
	if err != nil {
		t.Fatal(err)
	}
	if last := tl.Events[len(tl.Events)-1]; last.Type != task.EventCancelled || last.Reason != "plan cancelled: INC-12 stop it" {
		t.Fatalf("timeline ends with %+v", last)
	}
	eventually(t, 10*time.Second, func() error {
		if got := feedCount(t, b.coord, v.ID, task.EventCancelled); got != bulkTenants {
			return fmt.Errorf("%d task.cancelled events on the feed, want %d", got, bulkTenants)
		}
		return nil
	})
}

// TestRetryPlanRoundTrips: a bulk retry of 1 000 tasks takes about two
// round trips per task — the plan check and the write, one after the other
// so that a cancel stops the retry between two tenants — instead of 8
// (the tenant's task in two, the plan, the lock, the task under the lock,
// the write, the queue push, one after the other: 14.5 s for 10 000
// tasks). The
// retried tasks are queued with their timeline entries, feed events, exact
// counts and their locks released, and then run.
func TestRetryPlanRoundTrips(t *testing.T) {
	t.Parallel()
	own := &ownCounter{}
	b := setup(t, withHook(redistest.Backends()[1], own), sharedMode)
	c, gate := gatedCoord(t, b)
	ctx := context.Background()
	tenants := make([]string, bulkTenants)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("br-%04d", i)
	}
	s := spec(threeNoops(), tenants...)
	s.MaxConcurrency = 100
	no := false
	s.Start = &no
	v, err := c.CreatePlan(ctx, s, anyone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CancelPlan(ctx, v.ID, "INC-12 not now", anyone); err != nil {
		t.Fatal(err)
	}
	b.waitPlan(c, v.ID, plan.StatusCancelled)
	// No retried task starts during the count.
	gate.open.Store(false)
	var res facade.PlanRetryResult
	var mine int64
	n := b.counter.Count(func() {
		mine = own.count(func(ctx context.Context) {
			res, err = c.RetryPlan(ctx, v.ID, facade.PlanRetryRequest{Statuses: []task.Status{task.StatusCancelled}, Reason: "INC-12 go"}, anyone)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Retried) != bulkTenants || len(res.Skipped) != 0 {
		t.Fatalf("bulk retry: %d retried, skipped %v", len(res.Retried), res.Skipped[:min(3, len(res.Skipped))])
	}
	// The process's other work (its plan loop, heartbeats, the feed) adds
	// round trips as time goes by: only the retry's own are budgeted. Two
	// a task one after the other (the plan check, the write), plus the
	// preparation's: two reads of 256 tenants each, and the locks, whose
	// shared pipelines depend on timing (0.07 to 0.3 a task measured, 0.57
	// under -race on a loaded machine; at worst one a task, when no two
	// acquisitions share a pipeline). The budget is that worst case, 3.1 a
	// task, so that timing cannot fail the test; it was 8.0 a task.
	t.Logf("bulk retry of %d tasks: %d round trips of its own, %d in all", bulkTenants, mine, n)
	if budget := int64(bulkTenants * 31 / 10); mine > budget {
		t.Errorf("bulk retry of %d tasks: %d round trips, want at most %d", bulkTenants, mine, budget)
	}
	pv, err := c.Plan(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if pv.Status != plan.StatusRunning || pv.Counts[task.StatusPending] != bulkTenants {
		t.Fatalf("plan after the retry: %s %v", pv.Status, pv.Counts)
	}
	checkRecount(t, b, v.ID)
	for _, tn := range []string{tenants[0], tenants[bulkTenants-1]} {
		tl, err := c.Timeline(ctx, tn, 0)
		if err != nil {
			t.Fatal(err)
		}
		last := tl.Events[len(tl.Events)-1]
		if last.Type != task.EventRetryRequested || last.Reason != "INC-12 go" || last.Data["queued"] != true || last.Attempt != 1 {
			t.Fatalf("%s: timeline ends with %+v", tn, last)
		}
		if li, err := b.locks.View(ctx, tn); err != nil || li.Held {
			t.Fatalf("%s: lock %+v %v after the retry, want released", tn, li, err)
		}
	}
	eventually(t, 10*time.Second, func() error {
		if got := feedCount(t, c, v.ID, task.EventRetryRequested); got != bulkTenants {
			return fmt.Errorf("%d task.retry_requested events on the feed, want %d", got, bulkTenants)
		}
		return nil
	})
	// Queued: they run.
	gate.open.Store(true)
	pv = b.waitPlan(c, v.ID, plan.StatusCompleted)
	if pv.Counts[task.StatusCompleted] != bulkTenants {
		t.Fatalf("counts once the retried tasks ran: %v", pv.Counts)
	}
	checkRecount(t, b, v.ID)
}

// ownCounter is a go-redis hook that counts the round trips made with a
// context count marked: those of one call, not the process's other work.
// A pipeline the store or the locker shares between callers carries its
// first caller's context (values included).
type ownCounter struct{ n atomic.Int64 }

type ownMark struct{}

// count runs f with a marked context and returns its round trips.
func (o *ownCounter) count(f func(ctx context.Context)) int64 {
	before := o.n.Load()
	f(context.WithValue(context.Background(), ownMark{}, true))
	return o.n.Load() - before
}

func (o *ownCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (o *ownCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(ownMark{}) != nil && !redistest.Handshake(cmd) {
			o.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (o *ownCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(ownMark{}) != nil && len(cmds) > 0 && !redistest.Handshake(cmds[0]) {
			o.n.Add(1)
		}
		return next(ctx, cmds)
	}
}
