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
// plan (CANCELLED -> RUNNING). The correction puts the cancel back in the
// counts and the plan back to what it was before the move nobody announced:
// CANCELLED with the operator's reason and end, not FAILED "0 of 1 tasks
// did not complete" (which it became before: the operator's cancel turned
// into a failure). Across the refused write the plan did not change, and
// the refusal says so.
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
		if after.Status != plan.StatusCancelled || after.Reason != p.Reason || !after.FinishedAt.Equal(p.FinishedAt) {
			t.Errorf("plan after the correction: %s %q finished %v, want it as cancelled: CANCELLED %q finished %v",
				after.Status, after.Reason, after.FinishedAt, p.Reason, p.FinishedAt)
		}
		if res.PlanStatusChanged || res.PlanStatus != string(after.Status) {
			t.Errorf("refusal %+v: want PlanStatus %s, PlanStatusChanged false (CANCELLED before and after)", res, after.Status)
		}
		checkCounts(t, e, p.ID)
	})
}
