package facade_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

func TestRetryPlan(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		for _, tn := range []string{"t-a", "t-b", "t-c"} {
			b.target.script(tn, "verify", 500)
		}
		v := b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{}), b.httpStage("verify", task.RetryPolicy{})},
			"t-a", "t-b", "t-c", "t-ok"))
		b.waitPlan(b.coord, v.ID, plan.StatusFailed)
		b.idle(b.coord)
		failed := facade.PlanRetryRequest{Statuses: []task.Status{task.StatusFailed}, Reason: "INC-9 target fixed"}

		t.Run("Invalid", func(t *testing.T) {
			for name, req := range map[string]facade.PlanRetryRequest{
				"NoReason":       {Statuses: []task.Status{task.StatusFailed}},
				"NoSelection":    {Reason: "x"},
				"Completed":      {Statuses: []task.Status{task.StatusCompleted}, Reason: "x"},
				"BadStatus":      {Statuses: []task.Status{"failed"}, Reason: "x"},
				"HostileTenant":  {Statuses: []task.Status{task.StatusFailed}, Tenants: []string{"t-{a}:*"}, Reason: "x"},
				"TwoModes":       {Statuses: []task.Status{task.StatusFailed}, FromStage: "push", FromCheckpoint: new(bool), Reason: "x"},
				"Running":        {Statuses: []task.Status{task.StatusRunning}, Reason: "x"},
				"Pending":        {Statuses: []task.Status{task.StatusPending}, Reason: "x"},
				"StatusTwice":    {Statuses: []task.Status{task.StatusFailed, task.StatusFailed}, Reason: "x"},
				"EmptyTenants":   {Statuses: []task.Status{task.StatusFailed}, Tenants: []string{}, Reason: "x"},
				"TenantTwice":    {Statuses: []task.Status{task.StatusFailed}, Tenants: []string{"t-a", "t-b", "t-a"}, Reason: "x"},
				"TooManyTenants": {Statuses: []task.Status{task.StatusFailed}, Tenants: manyTenants(facade.MaxBulkTenants + 1), Reason: "x"},
				"ReasonControl":  {Statuses: []task.Status{task.StatusFailed}, Reason: "x\x1b[31m"},
				"FromStageGlob":  {Statuses: []task.Status{task.StatusFailed}, FromStage: "pu*", Reason: "x"},
			} {
				_, err := b.coord.RetryPlan(ctx, v.ID, req, anyone)
				if !errors.Is(err, facade.ErrInvalid) {
					t.Errorf("%s: %v, want ErrInvalid", name, err)
				}
			}
			_, err := b.coord.RetryPlan(ctx, "plan-{x}", failed, anyone)
			mustCode(t, err, facade.ErrInvalid)
		})
		t.Run("DryRunChangesNothing", func(t *testing.T) {
			dry := failed
			dry.DryRun = true
			res, err := b.coord.RetryPlan(ctx, v.ID, dry, anyone)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(res.Retried)
			if !res.DryRun || res.Selected != 3 || !slices.Equal(res.Retried, []string{"t-a", "t-b", "t-c"}) || len(res.Skipped) != 0 {
				t.Fatalf("dry run: %+v", res)
			}
			pv, _ := b.coord.Plan(ctx, v.ID)
			if pv.Status != plan.StatusFailed || pv.Counts[task.StatusFailed] != 3 {
				t.Fatalf("dry run changed the plan: %s %v", pv.Status, pv.Counts)
			}
		})
		t.Run("NarrowedToTenants", func(t *testing.T) {
			b.target.script("t-a", "verify", 200)
			req := failed
			req.Tenants = []string{"t-a", "t-ok", "t-elsewhere"}
			res, err := b.coord.RetryPlan(ctx, v.ID, req, anyone)
			if err != nil || res.Selected != 1 || !slices.Equal(res.Retried, []string{"t-a"}) {
				t.Fatalf("narrowed retry: %+v %v", res, err)
			}
			// Named but not selected (completed here; not in this plan): said so.
			if !slices.Equal(res.NotSelected, []string{"t-ok", "t-elsewhere"}) {
				t.Fatalf("narrowed retry: not selected %v, want [t-ok t-elsewhere]", res.NotSelected)
			}
			b.waitTask(b.coord, "t-a", task.StatusCompleted)
		})
		t.Run("TwoOperatorsAtOnce", func(t *testing.T) {
			b.target.script("t-b", "verify", 200)
			b.target.script("t-c", "verify", 200)
			var wg sync.WaitGroup
			results := make([]facade.PlanRetryResult, 2)
			for i := range results {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					if results[i], err = b.coord.RetryPlan(ctx, v.ID, failed, anyone); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			retried := append(slices.Clone(results[0].Retried), results[1].Retried...)
			slices.Sort(retried)
			// Each tenant at most once; together both calls retried both.
			if !slices.Equal(retried, []string{"t-b", "t-c"}) {
				t.Fatalf("two concurrent bulk retries retried %v (%+v, %+v)", retried, results[0], results[1])
			}
			b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
			for _, tn := range []string{"t-b", "t-c"} {
				tv := b.waitTask(b.coord, tn, task.StatusCompleted)
				if tv.Attempt != 2 || b.target.count(tn, "push") != 1 || b.target.count(tn, "verify") != 2 {
					t.Fatalf("%s: attempt %d, push %d, verify %d", tn, tv.Attempt, b.target.count(tn, "push"), b.target.count(tn, "verify"))
				}
			}
			pv, _ := b.coord.Plan(ctx, v.ID)
			if pv.Counts[task.StatusCompleted] != 4 || pv.Counts[task.StatusFailed] != 0 {
				t.Fatalf("counts after the retries: %v", pv.Counts)
			}
		})
	})
}

func manyTenants(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("t-%05d", i)
	}
	return out
}
