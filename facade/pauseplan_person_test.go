package facade_test

import (
	"context"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestPlanPauseKeepsPersonsPause: a person pauses a running task, then the
// plan is paused before that task's stage ends. The task must pause with the
// person's reason, not "plan paused", so that the plan's resume leaves it
// paused (the runbook: "Tasks you paused one by one stay paused"). Both ways
// a person's pause reaches the run are covered: asked of the instance that
// runs the task (t-own) and of the other one (t-far). t-plan, paused only by
// the plan, resumes with it.
func TestPlanPauseKeepsPersonsPause(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		other := b.second("coord-b")
		coords := map[string]*facade.Coordinator{"coord-a": b.coord, "coord-b": other}
		ctx := context.Background()
		s := spec([]task.StageSpec{gateStage("hold"), noopStage("after")}, "t-own", "t-far", "t-plan")
		s.MaxConcurrency = 3
		v := b.create(s)
		owner := map[string]string{}
		for _, tn := range []string{"t-own", "t-far", "t-plan"} {
			b.gates.wait(t, tn, "hold")
			eventually(t, 10*time.Second, func() error {
				tv, err := b.coord.TaskByTenant(ctx, tn)
				if err != nil {
					return err
				}
				if tv.Status != task.StatusRunning || tv.Owner == "" {
					return errf("%s: %s owner %q", tn, tv.Status, tv.Owner)
				}
				owner[tn] = tv.Owner
				return nil
			})
		}
		notOwner := func(tn string) *facade.Coordinator {
			if owner[tn] == "coord-a" {
				return other
			}
			return b.coord
		}
		if _, err := coords[owner["t-own"]].PauseTask(ctx, "t-own", "INC-1 hold t-own", anyone); err != nil {
			t.Fatal(err)
		}
		if _, err := notOwner("t-far").PauseTask(ctx, "t-far", "INC-1 hold t-far", anyone); err != nil {
			t.Fatal(err)
		}
		if _, err := b.coord.PausePlan(ctx, v.ID, "INC-2 error rate up", anyone); err != nil {
			t.Fatal(err)
		}
		// Every instance sees the plan's pause on its next poll of the plan.
		time.Sleep(4 * b.cfg.PlanPoll)
		b.gates.openAll()
		for tn, want := range map[string]string{"t-own": "INC-1 hold t-own", "t-far": "INC-1 hold t-far", "t-plan": facade.ReasonPlanPaused} {
			if got := b.waitTask(b.coord, tn, task.StatusPaused); got.Reason != want {
				t.Errorf("%s (run by %s) paused with reason %q, want %q", tn, owner[tn], got.Reason, want)
			}
		}
		if _, err := b.coord.ResumePlan(ctx, v.ID, facade.ResumeOptions{Reason: "INC-2 false alarm"}, anyone); err != nil {
			t.Fatal(err)
		}
		b.waitTask(b.coord, "t-plan", task.StatusCompleted)
		b.idle(b.coord)
		b.idle(other)
		for _, tn := range []string{"t-own", "t-far"} {
			if tv, err := b.coord.TaskByTenant(ctx, tn); err != nil || tv.Status != task.StatusPaused {
				t.Errorf("%s after the plan's resume: %s %v, want PAUSED (a person paused it)", tn, tv.Status, err)
			}
		}
		if pv, _ := b.coord.Plan(ctx, v.ID); pv.Status != plan.StatusRunning || pv.Counts[task.StatusPaused] != 2 {
			t.Errorf("plan: %s %v, want RUNNING with 2 PAUSED", pv.Status, pv.Counts)
		}
	})
}
