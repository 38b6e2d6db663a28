package facade_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// holdFirstAcquire is a Locker whose first successful Acquire returns only
// once release is closed: the caller holds the lock but has not registered
// its run yet.
type holdFirstAcquire struct {
	facade.Locker[*redislock.Lease]
	held             atomic.Bool
	entered, release chan struct{}
}

func (h *holdFirstAcquire) Acquire(ctx context.Context, tenantID string, holder tenantlock.Holder) (*redislock.Lease, error) {
	lease, err := h.Locker.Acquire(ctx, tenantID, holder)
	if err == nil && h.held.CompareAndSwap(false, true) {
		close(h.entered)
		<-h.release
	}
	return lease, err
}

// TestRetryRaceKeepsTheLiveLock: two retries of one task on one instance.
// The first holds the tenant's lock and has not registered its run yet when
// the second finds the lock held by this task on this instance with no run
// here. That lock is live, not an attempt whose answer was lost: the second
// retry gets TASK_RUNNING and the first one runs the task.
func TestRetryRaceKeepsTheLiveLock(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		b.target.script("t-race", "one", 500, 200)
		v := b.create(spec([]task.StageSpec{b.httpStage("one", task.RetryPolicy{})}, "t-race"))
		b.waitPlan(b.coord, v.ID, plan.StatusFailed, plan.StatusPaused)
		b.idle(b.coord)

		held := &holdFirstAcquire{Locker: b.locks, entered: make(chan struct{}), release: make(chan struct{})}
		c, err := facade.New(b.store, held, b.cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
		ctx := context.Background()
		first := make(chan error, 1)
		go func() {
			_, err := c.Retry(ctx, "t-race", facade.RetryRequest{ExpectedAttempt: 1, Reason: "first"}, anyone)
			first <- err
		}()
		<-held.entered
		_, err = c.Retry(ctx, "t-race", facade.RetryRequest{Reason: "second"}, anyone)
		close(held.release)
		mustCode(t, err, facade.ErrTaskRunning)
		if err := <-first; err != nil {
			t.Fatalf("the first retry: %v, want it to run the task", err)
		}
		tv := b.waitTask(c, "t-race", task.StatusCompleted)
		if tv.Attempt != 2 || b.target.count("t-race", "one") != 2 {
			t.Errorf("task attempt %d, stage called %d times; want 2 and 2 (the failure, the first retry)", tv.Attempt, b.target.count("t-race", "one"))
		}
	})
}
