package repository

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// snapshot is everything a refused write must leave alone.
type snapshot struct {
	task     *task.Task
	ckpt     *checkpoint.Checkpoint
	timeline []task.Event
	counts   plan.Counts
	plan     *plan.Plan
	lock     string
}

func snap(t *testing.T, e *env, tk *task.Task) snapshot {
	t.Helper()
	ctx := ctxT(t)
	stored, ck, err := e.store.Task(ctx, tk.ID)
	if err != nil {
		t.Fatalf("Task: %v", err)
	}
	tl, err := e.store.Timeline(ctx, tk.TenantID, tk.ID, 0)
	if err != nil {
		t.Fatalf("Timeline: %v", err)
	}
	p, counts, err := e.store.Plan(ctx, tk.PlanID)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	return snapshot{task: stored, ckpt: ck, timeline: tl, counts: counts, plan: p, lock: e.lockValue(tk.TenantID)}
}

func TestWriteTaskCommitsAtomically(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 3, 0)
		r := start(t, e, fx.tasks[0], 1)

		// Stage 0 done: checkpoint, stage progress and events in one write.
		e.clock.Add(time.Second)
		cp, _ := checkpoint.Empty().Complete(0, "push-config", map[string]any{"status": "ok"})
		cp = cp.Stamp(e.clock.Now(), 1, 1)
		r.tk.EnterStage(1, "migrate", e.clock.Now())
		idx := 0
		res := r.mustWrite(task.StatusRunning, task.Write{Checkpoint: &cp, Events: []task.Event{
			task.Event{At: e.clock.Now(), Type: task.EventStageSucceeded, Duration: task.Duration(time.Second)}.AtStage(0, "push-config"),
			task.Event{At: e.clock.Now(), Type: task.EventStageStarted}.AtStage(1, "migrate"),
		}})
		if res.Seq != 2 || res.PlanStatus != "" {
			t.Fatalf("result %+v, want seq 2 and no plan status (no status change)", res)
		}
		got, ck, err := e.store.TaskByTenant(ctx, tenantName(0))
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != task.StatusRunning || got.StageIndex != 1 || got.StageName != "migrate" || got.Seq != 2 ||
			got.Fence != 1 || got.Owner != "coord-a" || !got.HeartbeatAt.Equal(e.clock.Now()) {
			t.Fatalf("stored task %+v", got)
		}
		if got.Params["version"] != "1.2.3" || got.Params["n"] != float64(0) {
			t.Fatalf("params %v", got.Params)
		}
		if ck == nil || ck.LastCompletedStageIndex != 0 || ck.ContextData["push-config"].(map[string]any)["status"] != "ok" || !ck.SavedAt.Equal(e.clock.Now()) {
			t.Fatalf("checkpoint %+v", ck)
		}
		tl, err := e.store.Timeline(ctx, tenantName(0), r.tk.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(tl) != 3 || tl[0].Type != task.EventStarted || tl[1].Type != task.EventStageSucceeded ||
			tl[1].StageIndex == nil || *tl[1].StageIndex != idx || tl[2].Type != task.EventStageStarted || tl[1].Duration.D() != time.Second {
			t.Fatalf("timeline %+v", tl)
		}
		if last, _ := e.store.Timeline(ctx, tenantName(0), r.tk.ID, 1); len(last) != 1 || last[0].Type != task.EventStageStarted {
			t.Fatalf("Timeline(limit 1) = %+v, want the newest entry", last)
		}

		// Last stage: COMPLETED with the lock released in the same write.
		e.clock.Add(time.Second)
		res = r.complete()
		if res.Seq != 3 || res.PlanStatus != string(plan.StatusRunning) {
			t.Fatalf("result %+v, want seq 3, plan RUNNING", res)
		}
		if v := e.lockValue(tenantName(0)); v != "" {
			t.Fatalf("lock %q still held after a releasing write", v)
		}
		got, ck, _ = e.store.Task(ctx, r.tk.ID)
		if got.Status != task.StatusCompleted || !got.FinishedAt.Equal(e.clock.Now()) || ck == nil {
			t.Fatalf("after complete: %+v, checkpoint %v", got, ck)
		}
		// A delete of the checkpoint (retry from the start) removes it.
		counts := checkCounts(t, e, fx.plan.ID)
		if counts[task.StatusCompleted] != 1 || counts[task.StatusPending] != 2 {
			t.Fatalf("counts %s", countsString(counts))
		}
	})
}

func TestWriteTaskDeleteCheckpoint(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		fx := createPlan(t, e, 1, 0)
		r := start(t, e, fx.tasks[0], 1)
		cp, _ := checkpoint.Empty().Complete(0, "push-config", nil)
		r.mustWrite(task.StatusRunning, task.Write{Checkpoint: &cp})
		if _, ck, _ := e.store.Task(ctxT(t), r.tk.ID); ck == nil {
			t.Fatal("checkpoint not stored")
		}
		r.mustWrite(task.StatusRunning, task.Write{DeleteCheckpoint: true})
		if _, ck, err := e.store.Task(ctxT(t), r.tk.ID); err != nil || ck != nil {
			t.Fatalf("checkpoint %+v, %v; want none", ck, err)
		}
	})
}

func TestWriteTaskRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		reason task.RefuseReason
		// zombie returns the refused write, after a takeover by fence 2.
		zombie func(t *testing.T, e *env, old, now *runner) (*task.Task, task.Write)
	}{
		{"RefusedLock", task.RefusedLock, func(t *testing.T, e *env, old, _ *runner) (*task.Task, task.Write) {
			// The zombie still believes it holds the lock with fence 1.
			z := old.tk.Clone()
			_ = z.Fail(e.clock.Now(), "zombie")
			return z, task.Write{Task: z, PrevStatus: task.StatusRunning, ExpectSeq: old.tk.Seq, Guard: old.guard, ReleaseLock: true}
		}},
		{"RefusedFence", task.RefusedFence, func(t *testing.T, e *env, old, now *runner) (*task.Task, task.Write) {
			// An unlocked write that read the record before the takeover.
			z := now.tk.Clone()
			_ = z.Cancel(e.clock.Now(), "operator")
			return z, task.Write{Task: z, PrevStatus: task.StatusRunning, ExpectSeq: now.tk.Seq, Guard: task.Guard{Fence: 1}}
		}},
		{"RefusedSeq", task.RefusedSeq, func(t *testing.T, e *env, old, now *runner) (*task.Task, task.Write) {
			// The current owner with a stale seq.
			z := now.tk.Clone()
			_ = z.Pause(e.clock.Now(), "stale")
			return z, task.Write{Task: z, PrevStatus: task.StatusRunning, ExpectSeq: now.tk.Seq - 1, Guard: now.guard}
		}},
		{"RefusedMissing", task.RefusedMissing, func(t *testing.T, e *env, old, now *runner) (*task.Task, task.Write) {
			z := now.tk.Clone()
			z.ID = task.NewID(e.clock.Now())
			_ = z.Fail(e.clock.Now(), "ghost")
			return z, task.Write{Task: z, PrevStatus: task.StatusRunning, ExpectSeq: now.tk.Seq, Guard: now.guard}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eachStore(t, func(t *testing.T, e *env) {
				fx := createPlan(t, e, 2, 0)
				old := start(t, e, fx.tasks[0], 1)
				// The lease of fence 1 ran out; fence 2 took the orphan over.
				e.clock.Add(time.Minute)
				now := &runner{t: t, e: e, tk: old.tk.Clone(), guard: task.Guard{LockValue: "lock-new", Fence: 2}}
				e.setLock(tenantName(0), now.guard.LockValue)
				if err := now.tk.Rerun(e.clock.Now(), "coord-b", 2, 0, "push-config", task.RetryResume, true); err == nil {
					t.Fatal("resume of a running task should be refused")
				}
				if err := now.tk.Rerun(e.clock.Now(), "coord-b", 2, 0, "push-config", task.RetryNew, true); err != nil {
					t.Fatal(err)
				}
				cp, _ := checkpoint.Empty().Complete(0, "push-config", map[string]any{"by": "fence-2"})
				now.mustWrite(task.StatusRunning, task.Write{Checkpoint: &cp, Events: []task.Event{{Type: task.EventRetryRequested}}})

				before := snap(t, e, now.tk)
				z, w := tt.zombie(t, e, old, now)
				cpz, _ := checkpoint.Empty().Complete(0, "push-config", map[string]any{"by": "zombie"})
				w.Checkpoint = &cpz
				w.Events = []task.Event{{Type: task.EventFailed, Reason: "zombie"}}
				_, err := e.store.WriteTask(ctxT(t), w)
				re := refusedAs(t, err, tt.reason)
				if tt.reason != task.RefusedMissing {
					if re.Status != task.StatusRunning || re.Seq != now.tk.Seq || re.Fence != 2 || re.Owner != "coord-b" || re.TaskID != z.ID {
						t.Fatalf("refusal %+v does not describe the stored record", re)
					}
				}
				after := snap(t, e, now.tk)
				if !reflect.DeepEqual(before, after) {
					t.Fatalf("refused write changed the store:\nbefore %+v\nafter  %+v", before, after)
				}
				checkCounts(t, e, fx.plan.ID)
			})
		})
	}
}

func TestWriteTaskReleaseLockOnlyWhenHeld(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		fx := createPlan(t, e, 1, 0)
		r := start(t, e, fx.tasks[0], 1)
		e.setLock(tenantName(0), "someone-else")
		_ = r.tk.Complete(e.clock.Now())
		_, err := r.write(task.StatusRunning, task.Write{ReleaseLock: true})
		refusedAs(t, err, task.RefusedLock)
		if v := e.lockValue(tenantName(0)); v != "someone-else" {
			t.Fatalf("lock = %q: a refused write released another holder's lock", v)
		}
		e.setLock(tenantName(0), r.guard.LockValue)
		if _, err := r.write(task.StatusRunning, task.Write{}); err != nil {
			t.Fatal(err)
		}
		if v := e.lockValue(tenantName(0)); v != r.guard.LockValue {
			t.Fatalf("lock = %q after a write without ReleaseLock", v)
		}
	})
}

func TestWriteTaskReturnsRequests(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 2, 0)

		// Not running: a pause request is not stored.
		got, err := e.store.RequestTask(ctx, tenantName(1), fx.tasks[1].ID, task.RequestPause, task.Event{Type: task.EventPauseRequested})
		if err != nil || got.PauseRequested || got.Status != task.StatusPending {
			t.Fatalf("pause of a PENDING task: %+v, %v", got, err)
		}
		if tl, _ := e.store.Timeline(ctx, tenantName(1), fx.tasks[1].ID, 0); len(tl) != 0 {
			t.Fatalf("timeline %+v: an unstored request left an event", tl)
		}
		// A note changes nothing but is always recorded.
		got, err = e.store.RequestTask(ctx, tenantName(1), fx.tasks[1].ID, task.RequestNote, task.Event{Type: task.EventLockReleased, Actor: "sre"})
		if err != nil || got.Status != task.StatusPending || got.Seq != fx.tasks[1].Seq || got.PauseRequested || got.CancelRequested {
			t.Fatalf("note: %+v, %v", got, err)
		}
		if tl, _ := e.store.Timeline(ctx, tenantName(1), fx.tasks[1].ID, 0); len(tl) != 1 || tl[0].Type != task.EventLockReleased {
			t.Fatalf("timeline after a note: %+v", tl)
		}

		r := start(t, e, fx.tasks[0], 1)
		got, err = e.store.RequestTask(ctx, tenantName(0), r.tk.ID, task.RequestPause, task.Event{Type: task.EventPauseRequested, Actor: "sre", Reason: "INC-1"})
		if err != nil || !got.PauseRequested || got.Seq != r.tk.Seq {
			t.Fatalf("pause of a RUNNING task: %+v, %v (seq must not move)", got, err)
		}
		got, err = e.store.RequestTask(ctx, tenantName(0), r.tk.ID, task.RequestCancel, task.Event{Type: task.EventCancelRequested})
		if err != nil || !got.CancelRequested || !got.PauseRequested {
			t.Fatalf("cancel: %+v, %v", got, err)
		}
		res := r.mustWrite(task.StatusRunning, task.Write{})
		if !res.PauseRequested || !res.CancelRequested {
			t.Fatalf("result %+v does not carry the stored requests", res)
		}
		got, err = e.store.RequestTask(ctx, tenantName(0), r.tk.ID, task.RequestClearPause, task.Event{Type: task.EventResumed})
		if err != nil || got.PauseRequested || !got.CancelRequested {
			t.Fatalf("clear_pause: %+v, %v", got, err)
		}
		// A write never sets the requests from its task.
		r.tk.PauseRequested = true
		if res := r.mustWrite(task.StatusRunning, task.Write{}); res.PauseRequested || !res.CancelRequested {
			t.Fatalf("result %+v: the writer's PauseRequested leaked into the record", res)
		}
		_ = r.tk.Cancel(e.clock.Now(), "requested")
		if res := r.mustWrite(task.StatusRunning, task.Write{ClearRequests: true}); res.PauseRequested || res.CancelRequested {
			t.Fatalf("result %+v after ClearRequests", res)
		}
		tl, _ := e.store.Timeline(ctx, tenantName(0), r.tk.ID, 0)
		var types []task.EventType
		for _, ev := range tl {
			types = append(types, ev.Type)
		}
		want := []task.EventType{task.EventStarted, task.EventPauseRequested, task.EventCancelRequested, task.EventResumed}
		if !reflect.DeepEqual(types, want) {
			t.Fatalf("timeline %v, want %v", types, want)
		}
		if tl[1].Actor != "sre" || tl[1].Reason != "INC-1" {
			t.Fatalf("event %+v lost its fields", tl[1])
		}
		if _, err := e.store.RequestTask(ctx, tenantName(0), task.NewID(t0), task.RequestPause, task.Event{}); !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("request of a missing task: %v, want task.ErrNotFound", err)
		}
		if _, err := e.store.RequestTask(ctx, tenantName(0), r.tk.ID, "reboot", task.Event{}); !errors.Is(err, task.ErrInvalid) {
			t.Fatalf("unknown request: %v, want task.ErrInvalid", err)
		}
	})
}

func TestWriteTaskTimelineBounded(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		fx := createPlan(t, e, 1, 0)
		r := start(t, e, fx.tasks[0], 1)
		for round := 0; round < 3; round++ {
			evs := make([]task.Event, 80)
			for i := range evs {
				evs[i] = task.Event{Type: task.EventStageRetrying, Attempt: 1, StageAttempt: round*80 + i + 1}
			}
			r.mustWrite(task.StatusRunning, task.Write{Events: evs})
		}
		tl, err := e.store.Timeline(ctxT(t), tenantName(0), r.tk.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		// 1 started + 240 retries, bounded to the newest 200.
		if len(tl) != task.MaxTimeline || tl[len(tl)-1].StageAttempt != 240 || tl[0].StageAttempt != 41 {
			t.Fatalf("timeline of %d entries, first %+v, last %+v", len(tl), tl[0], tl[len(tl)-1])
		}
		// What is stored is bounded too, not only what is read.
		var stored int
		if e.redis != nil {
			k, _ := e.redis.keys.Timeline(tenantName(0), r.tk.ID)
			stored = int(e.client.LLen(ctxT(t), k).Val())
		} else {
			m := e.store.(*Memory)
			m.mu.Lock()
			stored = len(m.tasks[r.tk.ID].timeline)
			m.mu.Unlock()
		}
		if stored != task.MaxTimeline {
			t.Fatalf("%d timeline entries stored, want %d", stored, task.MaxTimeline)
		}
	})
}

func TestPlanStatusDerived(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		planStatus := func(planID string) *plan.Plan {
			p, _, err := e.store.Plan(ctx, planID)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}

		// All complete → COMPLETED.
		fx := createPlan(t, e, 3, 0)
		var last task.WriteResult
		// Only the write whose move changed the plan's status says so
		// (PlanStatusChanged: the feed's plan events are published once).
		changed := func(step string, res task.WriteResult, want bool) {
			t.Helper()
			if res.PlanStatusChanged != want {
				t.Fatalf("%s: PlanStatusChanged %v (plan status %q), want %v", step, res.PlanStatusChanged, res.PlanStatus, want)
			}
		}
		for i, tk := range fx.tasks {
			r := start(t, e, tk, int64(i+1))
			checkCounts(t, e, fx.plan.ID)
			e.clock.Add(time.Second)
			last = r.complete()
			checkCounts(t, e, fx.plan.ID)
			changed(fmt.Sprintf("task %d completed", i), last, i == len(fx.tasks)-1)
		}
		p := planStatus(fx.plan.ID)
		if last.PlanStatus != string(plan.StatusCompleted) || p.Status != plan.StatusCompleted || p.Reason != "" || !p.FinishedAt.Equal(e.clock.Now()) {
			t.Fatalf("all completed: result %q, plan %+v", last.PlanStatus, p)
		}

		// One fails → FAILED; its retry reopens the plan; completing it → COMPLETED.
		fx = createPlan(t, e, 3, 0)
		var failed *runner
		for i, tk := range fx.tasks {
			r := start(t, e, tk, int64(i+1))
			if i == 1 {
				last = r.fail("HTTP 500")
				failed = r
			} else {
				last = r.complete()
			}
		}
		p = planStatus(fx.plan.ID)
		if last.PlanStatus != string(plan.StatusFailed) || p.Status != plan.StatusFailed || p.Reason != "1 of 3 tasks did not complete" {
			t.Fatalf("one failed: result %q, plan %+v", last.PlanStatus, p)
		}
		changed("the last task finished, one failed", last, true)
		e.clock.Add(time.Minute)
		retry := &runner{t: t, e: e, tk: failed.tk.Clone(), guard: task.Guard{LockValue: "retry", Fence: 10}}
		e.setLock(retry.tk.TenantID, "retry")
		if err := retry.tk.Rerun(e.clock.Now(), "coord-b", 10, 0, "push-config", task.RetryNew, false); err != nil {
			t.Fatal(err)
		}
		res := retry.mustWrite(task.StatusFailed, task.Write{DeleteCheckpoint: true, ClearRequests: true})
		p = planStatus(fx.plan.ID)
		if res.PlanStatus != string(plan.StatusRunning) || p.Status != plan.StatusRunning || !p.FinishedAt.IsZero() {
			t.Fatalf("retry: result %q, plan %+v", res.PlanStatus, p)
		}
		changed("retry reopened the plan", res, true)
		checkCounts(t, e, fx.plan.ID)
		res = retry.complete()
		if p = planStatus(fx.plan.ID); res.PlanStatus != string(plan.StatusCompleted) || p.Status != plan.StatusCompleted {
			t.Fatalf("retried task completed: result %q, plan %+v", res.PlanStatus, p)
		}
		changed("retried task completed", res, true)
		checkCounts(t, e, fx.plan.ID)

		// Failure threshold: more than 1 of 4 failed → PAUSED.
		fx = createPlan(t, e, 4, 1)
		for i := 0; i < 2; i++ {
			last = start(t, e, fx.tasks[i], 1).fail("boom")
			changed(fmt.Sprintf("failure %d of 1 allowed", i+1), last, i == 1)
		}
		p = planStatus(fx.plan.ID)
		if last.PlanStatus != string(plan.StatusPaused) || p.Status != plan.StatusPaused || p.Reason != plan.ReasonFailureThreshold {
			t.Fatalf("threshold: result %q, plan %+v", last.PlanStatus, p)
		}
		checkCounts(t, e, fx.plan.ID)
	})
}

// TestCancelledPlanStaysCancelled: a plan cancelled while a task runs (the
// task finishes its stage first, cooperatively) stays CANCELLED whatever its
// other tasks do, until a person re-runs one of them.
func TestCancelledPlanStaysCancelled(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 3, 0)
		running := start(t, e, fx.tasks[0], 1)
		e.clock.Add(time.Second)
		p := fx.plan.Clone()
		if err := p.Cancel(e.clock.Now(), "change freeze"); err != nil {
			t.Fatal(err)
		}
		if err := e.store.UpdatePlan(ctx, p, plan.StatusRunning, plan.StatusPaused); err != nil {
			t.Fatal(err)
		}
		cancelledAt := e.clock.Now()
		expect := func(step string, res task.WriteResult, want plan.Status) *plan.Plan {
			t.Helper()
			got, _, err := e.store.Plan(ctx, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			if res.PlanStatus != string(want) || got.Status != want {
				t.Fatalf("%s: write result %q, plan %s; want %s", step, res.PlanStatus, got.Status, want)
			}
			checkCounts(t, e, p.ID)
			return got
		}

		// The coordinator cancels an idle task without the lock.
		e.clock.Add(time.Second)
		idle := fx.tasks[1].Clone()
		if err := idle.Cancel(e.clock.Now(), "plan cancelled"); err != nil {
			t.Fatal(err)
		}
		res, err := e.store.WriteTask(ctx, task.Write{Task: idle, PrevStatus: task.StatusPending, ExpectSeq: idle.Seq,
			Guard: task.Guard{Fence: idle.Fence}, ClearRequests: true})
		if err != nil {
			t.Fatal(err)
		}
		got := expect("idle task cancelled", res, plan.StatusCancelled)
		if got.Reason != "change freeze" || !got.FinishedAt.Equal(cancelledAt) {
			t.Fatalf("idle task cancelled: plan reason %q, finished %v; want the cancel's", got.Reason, got.FinishedAt)
		}

		// An owner that read the plan before the cancel starts a PENDING task.
		e.clock.Add(time.Second)
		late := &runner{t: t, e: e, tk: fx.tasks[2].Clone(), guard: task.Guard{LockValue: "late", Fence: 1}}
		e.setLock(late.tk.TenantID, "late")
		if err := late.tk.Start(e.clock.Now(), "coord-a", 1); err != nil {
			t.Fatal(err)
		}
		expect("pending task started", late.mustWrite(task.StatusPending, task.Write{}), plan.StatusCancelled)

		// The running task honours the cancel; the late one fails.
		_ = running.tk.Cancel(e.clock.Now(), "plan cancelled")
		expect("running task cancelled", running.mustWrite(task.StatusRunning, task.Write{ReleaseLock: true}), plan.StatusCancelled)
		expect("late task failed", late.fail("boom"), plan.StatusCancelled)

		// A person retries the failed task: the plan runs again, then
		// finishes when the task does.
		e.clock.Add(time.Minute)
		stored, _, err := e.store.Task(ctx, late.tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		retry, res := rerun(t, e, stored, 2, "coord-b")
		if got := expect("failed task retried", res, plan.StatusRunning); !got.FinishedAt.IsZero() || got.Reason != "" {
			t.Fatalf("reopened plan: reason %q, finished %v", got.Reason, got.FinishedAt)
		}
		got = expect("retried task completed", retry.complete(), plan.StatusFailed)
		if got.Reason != "2 of 3 tasks did not complete" {
			t.Fatalf("finished again with reason %q", got.Reason)
		}
	})
}

// TestResumedPlanPausesOnNewFailureOnly: a plan paused by its failure
// threshold and resumed by a person runs on until a new failure.
func TestResumedPlanPausesOnNewFailureOnly(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 6, 1)
		expect := func(step string, res task.WriteResult, want plan.Status, reason string) {
			t.Helper()
			got, _, err := e.store.Plan(ctx, fx.plan.ID)
			if err != nil {
				t.Fatal(err)
			}
			if res.PlanStatus != string(want) || got.Status != want || got.Reason != reason {
				t.Fatalf("%s: write result %q, plan %s %q; want %s %q", step, res.PlanStatus, got.Status, got.Reason, want, reason)
			}
			checkCounts(t, e, fx.plan.ID)
		}
		expect("first failure", start(t, e, fx.tasks[0], 1).fail("boom"), plan.StatusRunning, "")
		expect("second failure", start(t, e, fx.tasks[1], 1).fail("boom"), plan.StatusPaused, plan.ReasonFailureThreshold)

		e.clock.Add(time.Minute)
		p, _, err := e.store.Plan(ctx, fx.plan.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Resume(e.clock.Now(), "coord-a"); err != nil {
			t.Fatal(err)
		}
		if err := e.store.UpdatePlan(ctx, p, plan.StatusPaused); err != nil {
			t.Fatal(err)
		}

		r := &runner{t: t, e: e, tk: fx.tasks[2].Clone(), guard: task.Guard{LockValue: "lock-2", Fence: 1}}
		e.setLock(r.tk.TenantID, "lock-2")
		if err := r.tk.Start(e.clock.Now(), "coord-a", 1); err != nil {
			t.Fatal(err)
		}
		expect("task started after the resume", r.mustWrite(task.StatusPending, task.Write{}), plan.StatusRunning, "")
		expect("task completed after the resume", r.complete(), plan.StatusRunning, "")
		expect("third failure", start(t, e, fx.tasks[3], 1).fail("boom"), plan.StatusPaused, plan.ReasonFailureThreshold)
	})
}

// TestTakeover: taking over an orphaned RUNNING task moves it to its new
// owner in the per-owner counters (Redis) and reopens a finished plan; a
// stage write of the same status leaves the counts alone.
func TestTakeover(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 2, 0)
		r := start(t, e, fx.tasks[0], 1)
		start(t, e, fx.tasks[1], 1)
		var pk planKeys
		ledger := func() string { return e.client.HGet(ctx, pk.counts, "t:"+r.tk.ID).Val() }
		owners := func() (a, b string) {
			return e.client.HGet(ctx, pk.counts, "RUNNING@coord-a").Val(), e.client.HGet(ctx, pk.counts, "RUNNING@coord-b").Val()
		}
		var before string
		if e.redis != nil {
			pk, _ = e.redis.keys.planKeys(fx.plan.ID)
			if a, b := owners(); a != "2" || b != "" {
				t.Fatalf("before: RUNNING@coord-a %q, RUNNING@coord-b %q; want 2 and none", a, b)
			}
			before = ledger()
		}

		// A stage write (RUNNING → RUNNING, no ClearRequests) does not go to
		// the counts.
		r.tk.EnterStage(1, stageNames[1], e.clock.Now())
		if res := r.mustWrite(task.StatusRunning, task.Write{}); res.PlanStatus != "" {
			t.Fatalf("stage write: plan status %q, want none (counts untouched)", res.PlanStatus)
		}
		if e.redis != nil && ledger() != before {
			t.Fatalf("stage write moved the ledger entry %q → %q", before, ledger())
		}

		// The plan is cancelled; its owner dies with the task running.
		e.clock.Add(time.Second)
		p := fx.plan.Clone()
		_ = p.Cancel(e.clock.Now(), "stop")
		if err := e.store.UpdatePlan(ctx, p, plan.StatusRunning); err != nil {
			t.Fatal(err)
		}
		e.clock.Add(time.Minute)
		var n int64
		var res task.WriteResult
		take := func() { _, res = rerun(t, e, r.tk, 2, "coord-b") }
		if e.counter != nil {
			n = e.counter.Count(take)
		} else {
			take()
		}
		if res.PlanStatus != string(plan.StatusRunning) {
			t.Fatalf("takeover: plan status %q, want RUNNING (a manual re-run reopens)", res.PlanStatus)
		}
		if got, _, _ := e.store.Plan(ctx, p.ID); got.Status != plan.StatusRunning {
			t.Fatalf("takeover: plan %s, want RUNNING", got.Status)
		}
		counts := checkCounts(t, e, fx.plan.ID)
		if counts[task.StatusRunning] != 2 {
			t.Fatalf("takeover counts %s", countsString(counts))
		}
		if e.redis == nil {
			return
		}
		if n != 2 {
			t.Errorf("takeover: %d round trips, want 2 (lock SET by the test + 1 write)", n)
		}
		if a, b := owners(); a != "1" || b != "1" {
			t.Fatalf("after takeover: RUNNING@coord-a %q, RUNNING@coord-b %q; want 1 and 1", a, b)
		}
		if led := ledger(); !strings.HasPrefix(led, "RUNNING|3|2|") || !strings.Contains(led, "|coord-b|") {
			t.Fatalf("ledger entry after takeover %q", led)
		}
		// A repair agrees with the moved counter.
		if _, _, err := e.store.RepairCounts(ctx, fx.plan.ID); err != nil {
			t.Fatal(err)
		}
		if a, b := owners(); a != "1" || b != "1" {
			t.Fatalf("after repair: RUNNING@coord-a %q, RUNNING@coord-b %q; want 1 and 1", a, b)
		}
	})
}

func TestBeat(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		r := start(t, e, fx.tasks[0], 3)
		e.clock.Add(10 * time.Second)
		if err := e.store.Beat(ctx, tenantName(0), r.tk.ID, r.guard, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		got, _, _ := e.store.Task(ctx, r.tk.ID)
		if !got.HeartbeatAt.Equal(e.clock.Now()) || got.Seq != r.tk.Seq {
			t.Fatalf("after beat: heartbeat %v seq %d", got.HeartbeatAt, got.Seq)
		}
		before := got.HeartbeatAt
		e.clock.Add(10 * time.Second)
		err := e.store.Beat(ctx, tenantName(0), r.tk.ID, task.Guard{LockValue: "other", Fence: 3}, e.clock.Now())
		refusedAs(t, err, task.RefusedLock)
		err = e.store.Beat(ctx, tenantName(0), r.tk.ID, task.Guard{LockValue: r.guard.LockValue, Fence: 2}, e.clock.Now())
		refusedAs(t, err, task.RefusedFence)
		err = e.store.Beat(ctx, tenantName(0), task.NewID(t0), r.guard, e.clock.Now())
		refusedAs(t, err, task.RefusedMissing)
		// An in-process lease (no lock value) is checked by its fence only.
		err = e.store.Beat(ctx, tenantName(0), r.tk.ID, task.Guard{Fence: 2}, e.clock.Now())
		refusedAs(t, err, task.RefusedFence)
		if got, _, _ := e.store.Task(ctx, r.tk.ID); !got.HeartbeatAt.Equal(before) {
			t.Fatalf("a refused beat moved the heartbeat to %v", got.HeartbeatAt)
		}
		if err := e.store.Beat(ctx, tenantName(0), r.tk.ID, task.Guard{Fence: 3}, e.clock.Now()); err != nil {
			t.Fatalf("beat of an in-process lease with the newest fence: %v", err)
		}
	})
}

func TestReads(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		first := createPlan(t, e, 2, 0)
		e.clock.Add(time.Second)
		second := createPlan(t, e, 1, 0)

		// The tenant's current task is the newest created for it.
		got, ck, err := e.store.TaskByTenant(ctx, tenantName(0))
		if err != nil || got.ID != second.tasks[0].ID || ck != nil {
			t.Fatalf("TaskByTenant = %+v, %v, %v; want the second plan's task", got, ck, err)
		}
		got, _, err = e.store.TaskByTenant(ctx, tenantName(1))
		if err != nil || got.ID != first.tasks[1].ID || got.PlanID != first.plan.ID {
			t.Fatalf("TaskByTenant(t-00001) = %+v, %v", got, err)
		}
		want := first.tasks[1]
		if got.TenantID != want.TenantID || got.Status != task.StatusPending || got.TotalStages != 3 ||
			got.StageName != "push-config" || !got.CreatedAt.Equal(want.CreatedAt) || got.Seq != 0 {
			t.Fatalf("stored task %+v, created %+v", got, want)
		}
		hist, err := e.store.TenantHistory(ctx, tenantName(0), 0)
		if err != nil || len(hist) != 2 || hist[0].ID != second.tasks[0].ID || hist[1].ID != first.tasks[0].ID {
			t.Fatalf("TenantHistory = %v, %v; want newest first", hist, err)
		}
		if hist, _ := e.store.TenantHistory(ctx, tenantName(0), 1); len(hist) != 1 {
			t.Fatalf("TenantHistory(limit 1) has %d tasks", len(hist))
		}
		if hist, err := e.store.TenantHistory(ctx, "t-nobody", 10); err != nil || len(hist) != 0 {
			t.Fatalf("TenantHistory of an unknown tenant = %v, %v", hist, err)
		}
		p, counts, err := e.store.Plan(ctx, first.plan.ID)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name != "rollout" || p.Status != plan.StatusRunning || p.Owner != "coord-a" || p.TotalTasks != 2 ||
			p.MaxConcurrency != 5 || p.OnTenantLocked != plan.LockWait || p.LockWait != 5*time.Minute ||
			!reflect.DeepEqual(p.StageNames(), stageNames) || p.Params["version"] != "1.2.3" || !p.StartedAt.Equal(t0) {
			t.Fatalf("stored plan %+v", p)
		}
		if counts[task.StatusPending] != 2 || counts.Total() != 2 || len(counts) != len(task.Statuses) {
			t.Fatalf("counts %v", counts)
		}

		notFound := []struct {
			name string
			err  error
			want error
		}{
			{"TaskByTenant", func() error { _, _, err := e.store.TaskByTenant(ctx, "t-nobody"); return err }(), task.ErrNotFound},
			{"Task", func() error { _, _, err := e.store.Task(ctx, task.NewID(t0)); return err }(), task.ErrNotFound},
			{"Timeline", func() error { _, err := e.store.Timeline(ctx, "t-nobody", task.NewID(t0), 10); return err }(), task.ErrNotFound},
			{"Plan", func() error { _, _, err := e.store.Plan(ctx, plan.NewID(t0)); return err }(), plan.ErrNotFound},
			{"PlanTasks", func() error { _, _, err := e.store.PlanTasks(ctx, plan.NewID(t0), plan.TaskFilter{}); return err }(), plan.ErrNotFound},
			{"RepairCounts", func() error { _, _, err := e.store.RepairCounts(ctx, plan.NewID(t0)); return err }(), plan.ErrNotFound},
			{"UpdatePlan", e.store.UpdatePlan(ctx, &plan.Plan{ID: plan.NewID(t0), Status: plan.StatusPaused}), plan.ErrNotFound},
		}
		for _, tt := range notFound {
			if !errors.Is(tt.err, tt.want) {
				t.Errorf("%s of a missing record: %v, want %v", tt.name, tt.err, tt.want)
			}
		}
	})
}

func TestCreatePlanRefusesExistingID(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		fx := createPlan(t, e, 2, 0)
		again := fx.plan.Clone()
		again.Name = "impostor"
		again.TotalTasks = 1
		tk := task.New(task.NewID(t0), again.ID, "t-other", nil, stageNames, t0)
		err := e.store.CreatePlan(ctxT(t), again, []*task.Task{tk})
		if !errors.Is(err, ErrPlanExists) {
			t.Fatalf("CreatePlan with a taken id: %v, want ErrPlanExists", err)
		}
		p, counts, _ := e.store.Plan(ctxT(t), fx.plan.ID)
		if p.Name != "rollout" || counts[task.StatusPending] != 2 {
			t.Fatalf("plan %+v counts %v changed", p, counts)
		}
		if _, _, err := e.store.TaskByTenant(ctxT(t), "t-other"); !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("task of the refused plan stored: %v", err)
		}
		if n := len(allTasks(t, e, fx.plan.ID, plan.TaskFilter{})); n != 2 {
			t.Fatalf("plan lists %d tasks", n)
		}
	})
}

func TestCreatePlanRefusesBadInput(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		p := &plan.Plan{ID: plan.NewID(t0), Status: plan.StatusCreated, TotalTasks: 1}
		good := func() *task.Task { return task.New(task.NewID(t0), p.ID, "t-1", nil, stageNames, t0) }
		tests := []struct {
			name  string
			p     *plan.Plan
			tasks func() []*task.Task
			want  error
		}{
			{"bad plan id", &plan.Plan{ID: "plan-{x}", Status: plan.StatusCreated, TotalTasks: 1}, func() []*task.Task { return []*task.Task{good()} }, plan.ErrInvalid},
			{"count mismatch", p, func() []*task.Task { return []*task.Task{good(), good()} }, plan.ErrInvalid},
			{"bad tenant", p, func() []*task.Task { tk := good(); tk.TenantID = "t {x}"; return []*task.Task{tk} }, task.ErrInvalid},
			{"bad task id", p, func() []*task.Task { tk := good(); tk.ID = "task-*"; return []*task.Task{tk} }, task.ErrInvalid},
			{"other plan", p, func() []*task.Task { tk := good(); tk.PlanID = plan.NewID(t0); return []*task.Task{tk} }, task.ErrInvalid},
			{"not pending", p, func() []*task.Task { tk := good(); tk.Status = task.StatusRunning; return []*task.Task{tk} }, task.ErrInvalid},
			{"params not JSON", p, func() []*task.Task { tk := good(); tk.Params = map[string]any{"f": func() {}}; return []*task.Task{tk} }, task.ErrInvalid},
		}
		for _, tt := range tests {
			if err := e.store.CreatePlan(ctxT(t), tt.p, tt.tasks()); !errors.Is(err, tt.want) {
				t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
			}
		}
		if _, _, err := e.store.Plan(ctxT(t), p.ID); !errors.Is(err, plan.ErrNotFound) {
			t.Fatalf("a refused plan was stored: %v", err)
		}
	})
}

func TestUpdatePlan(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		p := fx.plan.Clone()
		e.clock.Add(time.Second)
		if err := p.Pause(e.clock.Now(), "change freeze"); err != nil {
			t.Fatal(err)
		}
		if err := e.store.UpdatePlan(ctx, p, plan.StatusRunning); err != nil {
			t.Fatal(err)
		}
		got, _, _ := e.store.Plan(ctx, p.ID)
		if got.Status != plan.StatusPaused || got.Reason != "change freeze" || !got.UpdatedAt.Equal(e.clock.Now()) || got.Name != "rollout" {
			t.Fatalf("after pause: %+v", got)
		}
		// A second pause from RUNNING finds PAUSED stored.
		err := e.store.UpdatePlan(ctx, p, plan.StatusRunning)
		var te *plan.TransitionError
		if !errors.As(err, &te) || te.From != plan.StatusPaused || te.To != plan.StatusPaused || !errors.Is(err, plan.ErrIllegalTransition) {
			t.Fatalf("CAS miss: %v, want a TransitionError from PAUSED", err)
		}
		_ = p.Resume(e.clock.Now(), "coord-b")
		if err := e.store.UpdatePlan(ctx, p, plan.StatusPaused, plan.StatusRunning); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := e.store.Plan(ctx, p.ID); got.Owner != "coord-b" || got.Status != plan.StatusRunning {
			t.Fatalf("after resume: %+v", got)
		}
	})
}

func TestWriteTaskRefusesBadInput(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		fx := createPlan(t, e, 1, 0)
		for _, id := range hostile {
			for name, mutate := range map[string]func(*task.Task){
				"tenant": func(tk *task.Task) { tk.TenantID = id },
				"task":   func(tk *task.Task) { tk.ID = id },
				"plan":   func(tk *task.Task) { tk.PlanID = id; tk.Status = task.StatusRunning },
			} {
				tk := fx.tasks[0].Clone()
				mutate(tk)
				_, err := e.store.WriteTask(ctxT(t), task.Write{Task: tk, PrevStatus: task.StatusPending})
				if !errors.Is(err, task.ErrInvalid) && !errors.Is(err, plan.ErrInvalid) {
					t.Errorf("write with %s id %q: %v, want an invalid-input error", name, id, err)
				}
			}
		}
		if _, err := e.store.WriteTask(ctxT(t), task.Write{}); !errors.Is(err, task.ErrInvalid) {
			t.Fatalf("write without a task: %v", err)
		}
		checkCounts(t, e, fx.plan.ID)
	})
}

func TestStoresDoNotAlias(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		nested := map[string]any{"deep": "original"}
		fx.tasks[0].Params["nested"] = nested // after create: must not reach the store
		r := start(t, e, fx.tasks[0], 1)
		r.tk.Params["nested"] = nested
		r.mustWrite(task.StatusRunning, task.Write{})
		nested["deep"] = "changed by the caller"
		got, _, _ := e.store.Task(ctx, r.tk.ID)
		got.Params["version"] = "mutated"
		again, _, _ := e.store.Task(ctx, r.tk.ID)
		if again.Params["version"] != "1.2.3" || again.Params["nested"].(map[string]any)["deep"] != "original" {
			t.Fatalf("stored params changed through an alias: %v", again.Params)
		}
		p, _, _ := e.store.Plan(ctx, fx.plan.ID)
		p.Stages[0].Name = "mutated"
		if p2, _, _ := e.store.Plan(ctx, fx.plan.ID); p2.Stages[0].Name != "push-config" {
			t.Fatalf("stored stages changed through an alias: %v", p2.Stages)
		}
	})
}

func ExampleKeys() {
	k, _ := NewKeys("executor:")
	lock, _ := k.Lock("t-001")
	fmt.Println(lock)
	// Output: executor:lock:tenant:{t-001}
}

// A run's last write deletes the lock with GETDEL before the record's
// checks: a lock it finds held by another value, and its own lock when a
// later check refuses the write, are put back with the lease as TTL; a
// lock it does not find stays absent. Nothing else changes on a refusal.
func TestReleaseWriteLeavesLocksItDoesNotRelease(t *testing.T) {
	t.Parallel()
	const lease = 20 * time.Second
	eachRedis(t, Config{LockLease: lease}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		lockKey := func(r *runner) string { k, _ := e.redis.keys.Lock(r.tk.TenantID); return k }
		final := func(r *runner, expect int64) task.Write {
			z := r.tk.Clone()
			_ = z.Complete(e.clock.Now())
			return task.Write{Task: z, PrevStatus: task.StatusRunning, ExpectSeq: expect, Guard: r.guard,
				ReleaseLock: true, Events: []task.Event{{Type: task.EventCompleted}}}
		}
		ttlOK := func(k string) {
			t.Helper()
			if d := e.client.PTTL(ctx, k).Val(); d <= 0 || d > lease {
				t.Errorf("TTL of %s = %s, want (0, %s]", k, d, lease)
			}
		}
		fx := createPlan(t, e, 4, 0)

		// Refused by seq after the lock check: the writer's own lock is back.
		r := start(t, e, fx.tasks[0], 1)
		before := snap(t, e, r.tk)
		_, err := e.store.WriteTask(ctx, final(r, r.tk.Seq+5))
		refusedAs(t, err, task.RefusedSeq)
		if v := e.lockValue(r.tk.TenantID); v != r.guard.LockValue {
			t.Fatalf("lock after a refused release: %q, want the writer's %q", v, r.guard.LockValue)
		}
		ttlOK(lockKey(r))
		if after := snap(t, e, r.tk); !reflect.DeepEqual(before, after) {
			t.Fatalf("refused release changed the store:\nbefore %+v\nafter  %+v", before, after)
		}
		// Then the release goes through and the lock is gone.
		if _, err := e.store.WriteTask(ctx, final(r, r.tk.Seq)); err != nil {
			t.Fatal(err)
		}
		if v := e.lockValue(r.tk.TenantID); v != "" {
			t.Fatalf("lock after the release: %q, want none", v)
		}

		// Another value holds the lock: refused, that lock back as it was.
		r = start(t, e, fx.tasks[1], 1)
		e.setLock(r.tk.TenantID, "someone-else")
		e.client.PExpire(ctx, lockKey(r), 5*time.Second)
		_, err = e.store.WriteTask(ctx, final(r, r.tk.Seq))
		refusedAs(t, err, task.RefusedLock)
		if v := e.lockValue(r.tk.TenantID); v != "someone-else" {
			t.Fatalf("another's lock after a refused release: %q", v)
		}
		ttlOK(lockKey(r))

		// No lock at all: refused, and none is made.
		r = start(t, e, fx.tasks[2], 1)
		e.setLock(r.tk.TenantID, "")
		_, err = e.store.WriteTask(ctx, final(r, r.tk.Seq))
		refusedAs(t, err, task.RefusedLock)
		if n := e.client.Exists(ctx, lockKey(r)).Val(); n != 0 {
			t.Fatalf("a refused release made a lock")
		}

		// Refused for the fixed fields ({2, fixed}: the writer resends them):
		// the lock is back before the resend, which then releases it.
		r = start(t, e, fx.tasks[3], 1)
		tkk, _ := e.redis.keys.taskKeys(r.tk.TenantID, r.tk.ID)
		tw, err := EncodeWrite(final(r, r.tk.Seq))
		if err != nil {
			t.Fatal(err)
		}
		tw.timelineMax, tw.ttl, tw.leaseMs = 200, 60000, lease.Milliseconds()
		tw.fixed.sum = "not-the-stored-sum"
		writeID := "fixed-1"
		v, err := e.redis.run(ctx, writeTaskScript, []string{tkk.task, tkk.ckpt, tkk.timeline, tkk.lock, tkk.history},
			tw.scriptArgs(&writeID, false, nil, false)...)
		if err != nil || replyInt(v.([]any)[0]) != 2 {
			t.Fatalf("release with a wrong fixed-field digest: %v, %v; want {2, fixed}", v, err)
		}
		if v := e.lockValue(r.tk.TenantID); v != r.guard.LockValue {
			t.Fatalf("lock after {2, fixed}: %q, want the writer's", v)
		}
		ttlOK(tkk.lock)
		if _, err := e.store.WriteTask(ctx, final(r, r.tk.Seq)); err != nil {
			t.Fatal(err)
		}
		if v := e.lockValue(r.tk.TenantID); v != "" {
			t.Fatalf("lock after the release: %q, want none", v)
		}
	})
}
