package facade_test

import (
	"context"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// A claimed start entry whose tenant is locked by someone else waits under
// the plan's onTenantLocked policy ("wait"): the task stays PENDING and
// runs once the holder lets go.
func TestSharedStartLockedTenantWaits(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		ctx := context.Background()
		other, err := b.locks.Acquire(ctx, "early-z", tenantlock.Holder{PlanID: "plan-other", TaskID: "task-other", Instance: "someone-else"})
		if err != nil {
			t.Fatal(err)
		}
		s := spec([]task.StageSpec{noopStage("deploy")}, "early-z")
		s.OnTenantLocked, s.LockWait = plan.LockWait, task.Duration(time.Minute)
		v := b.create(s)
		time.Sleep(300 * time.Millisecond)
		if z, err := b.coord.TaskByTenant(ctx, "early-z"); err != nil || z.Status != task.StatusPending {
			t.Fatalf("early-z while its tenant is locked: %v, %v; want PENDING", z.Status, err)
		}
		if err := other.Release(ctx); err != nil {
			t.Fatal(err)
		}
		b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
	})
}
