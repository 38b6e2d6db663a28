package repository

import (
	"context"
	"errors"
	"testing"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// planCountsStore is what the stores offer a plans listing.
type planCountsStore interface {
	PlanCounts(ctx context.Context, planIDs []string) (map[string]plan.Counts, error)
}

// TestPlanCounts: the counts of many plans in one call (one round trip on
// Redis, whatever their number), exact after task writes; unknown plans are
// absent; bad ids and too many ids are refused before anything is read.
func TestPlanCounts(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.store.(planCountsStore)
		a := createPlan(t, e, 3, 0)
		e.clock.Add(1)
		b := createPlan(t, e, 5, 0)
		r := start(t, e, b.tasks[0], 1)
		if err := r.tk.Fail(e.clock.Now(), "boom"); err != nil {
			t.Fatal(err)
		}
		r.mustWrite(task.StatusRunning, task.Write{})
		start(t, e, b.tasks[1], 2)
		unknown := plan.NewID(e.clock.Now())

		var got map[string]plan.Counts
		var err error
		read := func() { got, err = s.PlanCounts(ctx, []string{a.plan.ID, unknown, b.plan.ID}) }
		if e.counter != nil {
			if n := e.counter.Count(read); n != 1 {
				t.Errorf("PlanCounts of 3 plans: %d round trips, want 1", n)
			}
		} else {
			read()
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Fatalf("counts of %d plans, want 2 (the unknown one absent): %v", len(got), got)
		}
		if c := got[a.plan.ID]; c[task.StatusPending] != 3 || c.Total() != 3 {
			t.Errorf("plan a: %v", c)
		}
		if c := got[b.plan.ID]; c[task.StatusPending] != 3 || c[task.StatusFailed] != 1 || c[task.StatusRunning] != 1 || c.Total() != 5 {
			t.Errorf("plan b: %v", c)
		}
		if got, err := s.PlanCounts(ctx, nil); err != nil || len(got) != 0 {
			t.Errorf("no plans: %v %v", got, err)
		}

		for name, ids := range map[string][]string{
			"Braces":   {a.plan.ID, "plan-{x}"},
			"Glob":     {"plan-*"},
			"Control":  {"plan-\x1b[31m"},
			"TenantID": {"t-00000"},
			"TooMany":  make([]string, MaxPlanCounts+1),
		} {
			if name == "TooMany" {
				for i := range ids {
					ids[i] = a.plan.ID
				}
			}
			if _, err := s.PlanCounts(ctx, ids); !errors.Is(err, plan.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
	})
}
