package repository

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestRefusedWriteReportsCorrection: the last task of a plan finishes with
// a lock that is no longer its writer's. The record write is refused, its
// counts move (same pipeline) finished the plan all the same, and the
// store's correction undoes it, reopening the plan. The refusal carries the
// correction (task.WriteResult.CountsCorrected, the plan's status and
// counts after it) for the coordinator to publish; the plan's status is
// where it was before the write, so that is no status change.
func TestRefusedWriteReportsCorrection(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		tk := fx.tasks[0]
		start := claimedStart(t, e, tk, "value-a", 7)
		res, err := e.store.WriteTask(ctx, start)
		if err != nil || res.CountsCorrected {
			t.Fatalf("start: %+v, %v", res, err)
		}
		e.setLock(tk.TenantID, "someone-else") // the lease lapsed, another instance took the tenant
		done := start.Task.Clone()
		if err := done.Complete(e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		res, err = e.store.WriteTask(ctx, task.Write{Task: done, PrevStatus: task.StatusRunning, ExpectSeq: res.Seq,
			Guard: task.Guard{LockValue: "value-a", Fence: 7}, ReleaseLock: true, ID: task.NewWriteID()})
		var refused *task.RefusedError
		if !errors.As(err, &refused) || refused.Reason != task.RefusedLock {
			t.Fatalf("write with a lost lock: %v, want refused (lock)", err)
		}
		if !res.CountsCorrected || res.PlanStatus != string(plan.StatusRunning) || res.PlanStatusChanged ||
			res.Counts[task.StatusRunning] != 1 || res.Counts[task.StatusCompleted] != 0 {
			t.Fatalf("refusal's result %+v; want the correction: plan RUNNING (unchanged), 1 RUNNING, 0 COMPLETED", res)
		}
		checkCounts(t, e, fx.plan.ID)
	})
}

// TestCorrectionThatFinishesPlan: the interleaving of
// TestRedisZombieLedgerFirst on a plan of one task: the correction puts
// the operator's cancel into the counts, which leaves no active task, so
// it finishes the plan (FAILED: 0 of 1 completed) and says so.
func TestCorrectionThatFinishesPlan(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		tk := fx.tasks[0]
		pk, _ := e.redis.keys.planKeys(fx.plan.ID)
		tkk, _ := e.redis.keys.taskKeys(tk.TenantID, tk.ID)
		zombieStart(ctx, t, e, tk)
		c := tk.Clone()
		_ = c.Cancel(t0, "not needed")
		if _, err := e.store.WriteTask(ctx, task.Write{Task: c, PrevStatus: task.StatusPending, ExpectSeq: 0}); err != nil {
			t.Fatal(err)
		}
		e.clock.Add(time.Second)
		cc, err := e.redis.correctCounts(ctx, tkk, pk, tk.PlanID, tk.ID, zombieWrite)
		if err != nil {
			t.Fatal(err)
		}
		if !cc.corrected || !cc.changed || cc.status != string(plan.StatusFailed) || cc.counts[task.StatusCancelled] != 1 {
			t.Fatalf("correction answered %+v; want corrected, the plan changed to FAILED, 1 CANCELLED", cc)
		}
		p, _, err := e.store.Plan(ctx, fx.plan.ID)
		if err != nil || p.Status != plan.StatusFailed {
			t.Fatalf("plan after the correction: %v, %v; want FAILED", p, err)
		}
	})
}

// zombieWrite is the write id of zombieStart's counts move.
const zombieWrite = "zombie-write"

// zombieStart lands the counts move of a start of tk by a zombie (fence 5,
// its lease gone, coord-z) whose record write never comes: the ledger says
// RUNNING at seq 1 while the record does not.
func zombieStart(ctx context.Context, t *testing.T, e *env, tk *task.Task) {
	t.Helper()
	pk, _ := e.redis.keys.planKeys(tk.PlanID)
	v, err := e.redis.run(ctx, movePlanCountsScript, []string{pk.counts, pk.plan, pk.tasks},
		tk.ID, "RUNNING", 1, 5, zombieWrite, "coord-z", tk.TenantID, formatTime(t0), 60000, plan.ReasonFailureThreshold, micros(t0))
	if err != nil || replyInt(v.([]any)[1]) != 1 {
		t.Fatalf("zombie counts update: %v, %v", v, err)
	}
}
