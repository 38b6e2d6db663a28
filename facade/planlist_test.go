package facade_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestPlansCarryCounts: every plan of a listing carries its counts, the
// same as the plan read alone, so a list shows progress without a call per
// plan.
func TestPlansCarryCounts(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		b.target.script("t-x2", "push", 500)
		done := b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{})}, "t-x1", "t-x2", "t-x3"))
		held := b.create(spec([]task.StageSpec{gateStage("hold")}, "t-y1", "t-y2"))
		s := spec([]task.StageSpec{noopStage("n")}, "t-z1")
		s.Start = new(false)
		created := b.create(s)
		b.waitPlan(b.coord, done.ID, plan.StatusFailed)
		b.gates.wait(t, "t-y1", "hold")
		b.gates.wait(t, "t-y2", "hold")

		views, _, err := b.coord.Plans(ctx, plan.ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]plan.Counts{
			done.ID:    {task.StatusCompleted: 2, task.StatusFailed: 1},
			held.ID:    {task.StatusRunning: 2},
			created.ID: {task.StatusPending: 1},
		}
		if len(views) != 3 {
			t.Fatalf("%d plans listed, want 3", len(views))
		}
		for _, v := range views {
			alone, err := b.coord.Plan(ctx, v.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range task.Statuses {
				if v.Counts[st] != want[v.ID][st] || alone.Counts[st] != v.Counts[st] {
					t.Errorf("plan %s (%s): listed %v, alone %v, want %v", v.ID, v.Status, fmt.Sprint(v.Counts), fmt.Sprint(alone.Counts), want[v.ID])
					break
				}
			}
		}
		b.gates.openAll()
		b.waitPlan(b.coord, held.ID, plan.StatusCompleted)
	})
}
