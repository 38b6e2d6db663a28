package repository

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// beforeCorrection runs do once, just before the store's correction of a
// refused write reads the task record (its HMGET of status, seq, fence,
// owner on the task key): between the refused write's pipeline, whose
// counts move applied, and the correction — where another client's write
// lands in production.
type beforeCorrection struct {
	taskKey string
	once    sync.Once
	do      func()
}

func (h *beforeCorrection) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *beforeCorrection) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if a := c.Args(); c.Name() == "hmget" && len(a) > 2 && a[1] == h.taskKey && a[2] == fStatus {
			h.once.Do(h.do)
		}
		return next(ctx, c)
	}
}

func (h *beforeCorrection) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// stageRefusedThresholdFailure makes a plan of three tasks, failure
// threshold 1: task 0 fails (committed), task 1 runs, writes a stage
// (seq 2, no counts move) and then sends a stale failure (expected seq 1,
// the same fence). The failure is refused (seq), but its counts move (seq 2
// above the ledger's 1) applies: 2 failures > 1 pause the plan by the
// threshold — a change nobody announced, which the correction undoes.
// hook's do runs between the two. It returns the plan and the refusal.
func stageRefusedThresholdFailure(t *testing.T, e *env, do func(p *plan.Plan)) (*plan.Plan, task.WriteResult, error) {
	t.Helper()
	fx := createPlan(t, e, 3, 1)
	start(t, e, fx.tasks[0], 10).fail("boom")
	r := start(t, e, fx.tasks[1], 11)
	stale := r.tk.Clone()
	r.tk.StageIndex, r.tk.StageName = 1, stageNames[1]
	r.mustWrite(task.StatusRunning, task.Write{})
	if err := stale.Fail(e.clock.Now(), "late"); err != nil {
		t.Fatal(err)
	}
	tk, _ := e.redis.keys.taskKeys(stale.TenantID, stale.ID)
	e.client.AddHook(&beforeCorrection{taskKey: tk.task, do: func() { do(fx.plan) }})
	res, err := e.store.WriteTask(ctxT(t), task.Write{Task: stale, PrevStatus: task.StatusRunning, ExpectSeq: stale.Seq,
		Guard: r.guard, ReleaseLock: true, ID: task.NewWriteID()})
	var refused *task.RefusedError
	if !errors.As(err, &refused) || !res.CountsCorrected {
		t.Fatalf("stale failure: %+v, %v; want a refusal with a counts correction", res, err)
	}
	return fx.plan, res, err
}

// TestCorrectionKeepsOperatorRepause: the same refused failure pauses the
// plan by the threshold; before its correction, an operator resumes the
// plan and pauses it again (PAUSED -> RUNNING -> PAUSED, their own reason).
// The plan's status is the one the refused move left, but it is the
// operator's pause now: the correction must keep it (a check of the status
// alone cannot tell; the record says who set it last).
func TestCorrectionKeepsOperatorRepause(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const why = "INC-8 hold"
		p, _, _ := stageRefusedThresholdFailure(t, e, func(p *plan.Plan) {
			for _, to := range []plan.Status{plan.StatusRunning, plan.StatusPaused} {
				seen, _, err := e.store.Plan(ctx, p.ID)
				if err != nil {
					t.Error(err)
					return
				}
				from := seen.Status
				seen.Status, seen.Reason, seen.UpdatedAt = to, "", e.clock.Now()
				if to == plan.StatusPaused {
					seen.Reason = why
				}
				if err := e.store.UpdatePlan(ctx, seen, from); err != nil {
					t.Error(err)
				}
			}
		})
		after, _, err := e.store.Plan(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.Status != plan.StatusPaused || after.Reason != why {
			t.Errorf("plan after the correction: %s %q; want the operator's pause: PAUSED %q", after.Status, after.Reason, why)
		}
		checkCounts(t, e, p.ID)
	})
}

// TestCorrectionKeepsOperatorCancel: a refused failure's counts move pauses
// the plan by the failure threshold; before its correction, an operator
// cancels the plan (PAUSED -> CANCELLED, update_plan.lua). The correction
// must not undo the cancel: it put back the status from before the refused
// move (statusFrom RUNNING), so the cancelled plan ran on, RUNNING, with no
// reason and no end, and no event said so.
func TestCorrectionKeepsOperatorCancel(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		var cancelled *plan.Plan
		p, res, _ := stageRefusedThresholdFailure(t, e, func(p *plan.Plan) {
			seen, _, err := e.store.Plan(ctx, p.ID)
			if err != nil {
				t.Error(err)
				return
			}
			if seen.Status != plan.StatusPaused {
				t.Errorf("plan %s before the correction, want PAUSED by the refused move", seen.Status)
				return
			}
			if err := seen.Cancel(e.clock.Now(), "INC-7 stop"); err != nil {
				t.Error(err)
				return
			}
			if err := e.store.UpdatePlan(ctx, seen, plan.StatusPaused); err != nil {
				t.Error(err)
			}
			cancelled = seen
		})
		if cancelled == nil {
			t.Fatal("the operator's cancel did not run before the correction")
		}
		after, _, err := e.store.Plan(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.Status != plan.StatusCancelled || after.Reason != cancelled.Reason || !after.FinishedAt.Equal(cancelled.FinishedAt) {
			t.Errorf("plan after the correction: %s %q finished %v; want the operator's cancel: CANCELLED %q finished %v",
				after.Status, after.Reason, after.FinishedAt, cancelled.Reason, cancelled.FinishedAt)
		}
		if res.PlanStatus != string(after.Status) || res.PlanStatusChanged {
			// The cancel was the operator's, announced by its own action.
			t.Errorf("refusal %+v: want PlanStatus %s, PlanStatusChanged false", res, after.Status)
		}
		checkCounts(t, e, p.ID)
	})
}

// TestCorrectionUndoDoesNotReopen: an operator cancels the plan while a
// task runs (its run stops at its next boundary); the run's stale failure
// (expected seq 1, seq 2 written since by the same run without a counts
// move) is refused, but its counts move applies — on a cancelled plan it
// changes nothing. Its correction moves the task back FAILED -> RUNNING:
// that is the same run, not a re-run, and must not reopen the cancelled
// plan. It did: the correction derived it as a manual re-run (any move to
// RUNNING from other than PENDING reopens a finished plan), and the plan
// an operator cancelled was RUNNING again.
func TestCorrectionUndoDoesNotReopen(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 2, 0)
		r := start(t, e, fx.tasks[0], 11)
		stale := r.tk.Clone()
		r.tk.StageIndex, r.tk.StageName = 1, stageNames[1]
		r.mustWrite(task.StatusRunning, task.Write{})
		p := fx.plan
		if err := p.Cancel(e.clock.Now(), "INC-9 stop"); err != nil {
			t.Fatal(err)
		}
		if err := e.store.UpdatePlan(ctx, p, plan.StatusRunning); err != nil {
			t.Fatal(err)
		}
		if err := stale.Fail(e.clock.Now(), "late"); err != nil {
			t.Fatal(err)
		}
		res, err := e.store.WriteTask(ctx, task.Write{Task: stale, PrevStatus: task.StatusRunning, ExpectSeq: stale.Seq,
			Guard: r.guard, ReleaseLock: true, ID: task.NewWriteID()})
		var refused *task.RefusedError
		if !errors.As(err, &refused) || !res.CountsCorrected {
			t.Fatalf("stale failure: %+v, %v; want a refusal with a counts correction", res, err)
		}
		after, _, err := e.store.Plan(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.Status != plan.StatusCancelled || after.Reason != p.Reason {
			t.Errorf("plan after the correction: %s %q; want it as the operator cancelled it: CANCELLED %q", after.Status, after.Reason, p.Reason)
		}
		if res.PlanStatusChanged {
			t.Errorf("refusal %+v: want PlanStatusChanged false (CANCELLED before and after)", res)
		}
		checkCounts(t, e, p.ID)
	})
}
