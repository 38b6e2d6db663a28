package repository

import (
	"errors"
	"testing"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestRefusedStartAfterPlanCancelReportsChange: a plan is cancelled and
// its PENDING task cancelled (the cancel's write commits first), while a
// run that claimed the task before the cancel sends its start (the same
// expected seq, a higher fence). The start is refused, but its counts move
// ties the cancel's seq with a higher fence, so it applies and reopens the
// plan (CANCELLED -> RUNNING); the correction puts the cancel back in the
// counts, which finishes the plan again, as FAILED (0 of 1 completed). The
// plan went CANCELLED -> FAILED across this write, and nobody else saw it
// change (the cancel's own move did not apply): the refusal must say the
// status changed, or the feed never announces it.
func TestRefusedStartAfterPlanCancelReportsChange(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		tk := fx.tasks[0]
		p := fx.plan
		before := p.Status
		if err := p.Cancel(e.clock.Now(), "INC-9 stop"); err != nil {
			t.Fatal(err)
		}
		if err := e.store.UpdatePlan(ctx, p, before); err != nil {
			t.Fatal(err)
		}
		start := claimedStart(t, e, tk, "value-b", 9) // prepared before the cancel's write
		c := tk.Clone()
		if err := c.Cancel(e.clock.Now(), "plan cancelled: INC-9 stop"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.WriteTask(ctx, task.Write{Task: c, PrevStatus: task.StatusPending, ExpectSeq: tk.Seq,
			Guard: task.Guard{Fence: tk.Fence}, ClearRequests: true, ID: task.NewWriteID()}); err != nil {
			t.Fatal(err)
		}
		res, err := e.store.WriteTask(ctx, start)
		var refused *task.RefusedError
		if !errors.As(err, &refused) {
			t.Fatalf("start after the cancel's write: %v, want refused", err)
		}
		after, _, err := e.store.Plan(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !res.CountsCorrected {
			t.Fatalf("refusal %+v: want a counts correction (the start's move applied)", res)
		}
		if after.Status != plan.StatusCancelled && !res.PlanStatusChanged {
			t.Errorf("plan went CANCELLED -> %s across the refused write, but the refusal says PlanStatusChanged=false (%+v): "+
				"no instance announces the change", after.Status, res)
		}
		if res.PlanStatus != string(after.Status) {
			t.Errorf("refusal says plan %s, the store has %s", res.PlanStatus, after.Status)
		}
		checkCounts(t, e, p.ID)
	})
}
