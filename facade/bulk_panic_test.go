package facade_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// panicLocks panics on the acquisition of one tenant's lock.
type panicLocks struct {
	*redislock.Locker
	tenant string
}

func (l panicLocks) Acquire(ctx context.Context, tenantID string, h tenantlock.Holder) (*redislock.Lease, error) {
	if tenantID == l.tenant {
		panic("injected: acquire " + tenantID)
	}
	return l.Locker.Acquire(ctx, tenantID, h)
}

// TestBulkActionPanicReachesCaller: a panic in the work of a bulk action
// (a plan's cancel writes 64 tasks at once; a bulk retry takes 64 locks at
// once) reaches the caller's goroutine, as it did when they were written one
// after the other: the HTTP server turns a handler's panic into a 500
// (recoverPanic), while one on a goroutine of its own ends the process and
// orphans every task it runs. The bulk retry's other tenants are not left
// locked.
func TestBulkActionPanicReachesCaller(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		c, gate := gatedCoord(t, b)
		ctx := context.Background()
		v, ts := failedPlan(t, b, c, "pa", 8)
		x := newCoordinator(t, b, gate, panicLocks{Locker: b.locks, tenant: ts[5]}, "coord-x", nil)
		gate.open.Store(false)
		caught := func(f func()) (p any) {
			defer func() { p = recover() }()
			f()
			return nil
		}
		p := caught(func() {
			_, _ = x.RetryPlan(ctx, v.ID, facade.PlanRetryRequest{Statuses: []task.Status{task.StatusFailed}, Reason: "INC-8 target fixed"}, anyone)
		})
		if p == nil {
			t.Fatal("bulk retry: the injected panic did not reach the caller")
		}
		for _, tn := range ts {
			if li, err := b.locks.View(ctx, tn); err != nil || li.Held {
				t.Errorf("%s: lock %+v %v after the panic, want released", tn, li, err)
			}
		}
		gate.open.Store(true)
	})
}

// failedPlan creates on c a plan of n tenants <prefix>-0 … whose http stage
// "deploy" fails at its first call (and succeeds at its second), and waits
// until the plan is FAILED: a plan to retry in bulk.
func failedPlan(t *testing.T, b *bundle, c *facade.Coordinator, prefix string, n int) (facade.PlanView, []string) {
	t.Helper()
	ts := make([]string, n)
	for i := range ts {
		ts[i] = fmt.Sprintf("%s-%d", prefix, i)
		b.target.script(ts[i], "deploy", 500, 200)
	}
	v, err := c.CreatePlan(context.Background(), spec([]task.StageSpec{b.httpStage("deploy", task.RetryPolicy{})}, ts...), anyone)
	if err != nil {
		t.Fatal(err)
	}
	b.waitPlan(c, v.ID, plan.StatusFailed)
	return v, ts
}
