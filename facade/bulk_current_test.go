package facade_test

import (
	"context"
	"errors"
	"testing"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestBulkRetrySkipsTenantTakenByNewPlan: while a bulk retry goes through
// its tenants, a new plan takes one of them (its task becomes the tenant's
// current one). A retry of the old task would re-run the old change over
// the new one: a tenant's retry is refused once its task is no longer the
// tenant's current one, and a bulk retry must refuse it the same way when
// the new plan came after the retry began but before it reached that
// tenant (one retry after the other did; a chunk prepared up front checked
// it only when it took the locks, and wrote the old task PENDING).
func TestBulkRetrySkipsTenantTakenByNewPlan(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		c, gate := gatedCoord(t, b)
		ctx := context.Background()
		v, ts := failedPlan(t, b, c, "np", 8)
		stages := []task.StageSpec{b.httpStage("deploy", task.RetryPolicy{})}
		taken := ts[5]
		var newPlan string
		store := &afterWrites{Redis: b.store, at: 1, gate: gate, then: func() {
			// Nothing of the new plan starts: the gate holds the claims.
			nv, err := c.CreatePlan(ctx, spec(stages, taken), anyone)
			if err != nil {
				t.Error(err)
				return
			}
			newPlan = nv.ID
		}}
		x := newCoordinator(t, b, store, b.locks, "coord-x", nil)
		gate.open.Store(false)
		res, err := x.RetryPlan(ctx, v.ID, facade.PlanRetryRequest{Statuses: []task.Status{task.StatusFailed}, Reason: "INC-8 target fixed"}, anyone)
		if err != nil {
			t.Fatal(err)
		}
		if newPlan == "" {
			t.Fatal("the new plan was not created")
		}
		for _, r := range res.Retried {
			if r == taken {
				t.Errorf("%s retried: its task of plan %s is no longer its current one (plan %s's is)", taken, v.ID, newPlan)
			}
		}
		skipped := false
		for _, sk := range res.Skipped {
			if sk.TenantID == taken {
				skipped = true
				if !errors.Is(sk.Err, facade.ErrInvalidState) {
					t.Errorf("%s skipped with %v, want INVALID_STATE (no longer the current task)", taken, sk.Err)
				}
			}
		}
		if !skipped {
			t.Errorf("%s not skipped: retried %v skipped %v", taken, res.Retried, res.Skipped)
		}
		old, _, err := c.PlanTasks(ctx, v.ID, plan.TaskFilter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		recount := map[task.Status]int{}
		for _, tv := range old {
			recount[tv.Status]++
			if tv.TenantID == taken && tv.Status != task.StatusFailed {
				t.Errorf("plan %s's task of %s is %s, want FAILED (not re-run over plan %s)", v.ID, taken, tv.Status, newPlan)
			}
		}
		// The refused write's counts move applied (a higher fence) and was
		// corrected: the counts are a recount of the records.
		pv, err := c.Plan(ctx, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range task.Statuses {
			if pv.Counts[s] != recount[s] {
				t.Errorf("plan %s counts %v, recount %v", v.ID, pv.Counts, recount)
				break
			}
		}
		gate.open.Store(true)
	})
}
