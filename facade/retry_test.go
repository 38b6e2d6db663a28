package facade_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// failLast creates a plan whose last stage fails for tenant failing and
// waits until it is FAILED.
func (b *bundle) failLast(failing string, others ...string) facade.PlanView {
	b.t.Helper()
	b.target.script(failing, "verify", 500)
	v := b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{}), noopStage("settle"), b.httpStage("verify", task.RetryPolicy{})},
		append([]string{failing}, others...)...))
	b.waitPlan(b.coord, v.ID, plan.StatusFailed)
	b.idle(b.coord)
	return v
}

func TestRetryFromCheckpoint(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		v := b.failLast("t-bad", "t-ok")
		failed, err := b.coord.TaskByTenant(ctx, "t-bad")
		if err != nil {
			t.Fatal(err)
		}
		if failed.Status != task.StatusFailed || failed.Checkpoint.LastCompletedStageIndex != 1 {
			t.Fatalf("failed task %+v ckpt %+v", failed.Task, failed.Checkpoint)
		}

		t.Run("DryRun", func(t *testing.T) {
			res, err := b.coord.Retry(ctx, "t-bad", facade.RetryRequest{DryRun: true, Reason: "check"}, anyone)
			if err != nil || !res.DryRun || !slices.Equal(res.WouldRun, []string{"verify"}) || res.Task != nil {
				t.Fatalf("dry run: %+v %v", res, err)
			}
			after, _ := b.coord.TaskByTenant(ctx, "t-bad")
			if after.Seq != failed.Seq || after.Status != task.StatusFailed {
				t.Fatal("dry run changed the task")
			}
		})
		t.Run("ReasonRequired", func(t *testing.T) {
			_, err := b.coord.Retry(ctx, "t-bad", facade.RetryRequest{}, anyone)
			mustCode(t, err, facade.ErrInvalid)
		})
		t.Run("ExpectedAttemptMismatch", func(t *testing.T) {
			_, err := b.coord.Retry(ctx, "t-bad", facade.RetryRequest{ExpectedAttempt: 2, Reason: "x"}, anyone)
			mustCode(t, err, facade.ErrAttemptMismatch)
		})
		t.Run("FromCheckpointOnSecondInstance", func(t *testing.T) {
			b.target.script("t-bad", "verify", 200)
			other := b.second("coord-b")
			res, err := other.Retry(ctx, "t-bad", facade.RetryRequest{ExpectedAttempt: 1, Reason: "INC-7 target fixed"}, anyone)
			if err != nil {
				t.Fatal(err)
			}
			if res.Task.Status != task.StatusRunning || res.Task.Attempt != 2 || res.Task.Owner != "coord-b" {
				t.Fatalf("retry answer: %+v", res.Task.Task)
			}
			done := b.waitTask(other, "t-bad", task.StatusCompleted)
			if done.Attempt != 2 || done.Checkpoint.Attempt != 2 {
				t.Fatalf("completed task %+v", done.Task)
			}
			if b.target.count("t-bad", "push") != 1 || b.target.count("t-bad", "verify") != 2 {
				t.Fatalf("retry re-ran earlier stages: push %d, verify %d", b.target.count("t-bad", "push"), b.target.count("t-bad", "verify"))
			}
			b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
			tl, _ := b.coord.Timeline(ctx, "t-bad", 0)
			evs := tl.Events
			var audit *task.Event
			for i := range evs {
				if evs[i].Type == task.EventRetryRequested {
					audit = &evs[i]
				}
			}
			if audit == nil || audit.Actor != "sre-test" || audit.Reason != "INC-7 target fixed" || audit.RequestID != "req-1" {
				t.Fatalf("retry not audited in the timeline: %+v", audit)
			}
			_, err = other.Retry(ctx, "t-bad", facade.RetryRequest{Reason: "again"}, anyone)
			mustCode(t, err, facade.ErrTaskCompleted)
		})
	})
}

func TestRetryModes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		req      facade.RetryRequest
		wouldRun []string
		push     int // target calls of push after the retry
		check    func(t *testing.T, v facade.TaskView)
	}{
		{name: "FromStart", req: facade.RetryRequest{FromCheckpoint: new(bool)}, wouldRun: []string{"push", "settle", "verify"}, push: 2},
		{name: "FromStage", req: facade.RetryRequest{FromStage: "settle"}, wouldRun: []string{"settle", "verify"}, push: 1},
		{name: "SkipStage", req: facade.RetryRequest{SkipStage: true, Outputs: map[string]any{"verified": "by hand"}}, wouldRun: []string{}, push: 1,
			check: func(t *testing.T, v facade.TaskView) {
				if !slices.Equal(v.Checkpoint.SkippedStages, []string{"verify"}) {
					t.Fatalf("skipped %v", v.Checkpoint.SkippedStages)
				}
				out, _ := v.Checkpoint.ContextData["verify"].(map[string]any)
				if out["verified"] != "by hand" {
					t.Fatalf("supplied outputs missing: %v", v.Checkpoint.ContextData)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forBackends(t, func(t *testing.T, be redistest.Backend) {
				b := setup(t, be)
				ctx := context.Background()
				b.failLast("t-1")
				b.target.script("t-1", "verify", 200)
				req := tc.req
				req.Reason = "INC-9"
				dry := req
				dry.DryRun = true
				res, err := b.coord.Retry(ctx, "t-1", dry, anyone)
				if err != nil || !slices.Equal(res.WouldRun, tc.wouldRun) {
					t.Fatalf("dry run: %v %v, want %v", res.WouldRun, err, tc.wouldRun)
				}
				if _, err := b.coord.Retry(ctx, "t-1", req, anyone); err != nil {
					t.Fatal(err)
				}
				v := b.waitTask(b.coord, "t-1", task.StatusCompleted)
				if n := b.target.count("t-1", "push"); n != tc.push {
					t.Fatalf("push called %d times, want %d", n, tc.push)
				}
				if tc.check != nil {
					tc.check(t, v)
				}
			})
		})
	}
	t.Run("BadModes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, redistest.Backends()[0])
		ctx := context.Background()
		b.failLast("t-1")
		for name, req := range map[string]facade.RetryRequest{
			"TwoModes":        {FromStage: "push", SkipStage: true},
			"UnknownStage":    {FromStage: "nope"},
			"UncoveredStage":  {FromStage: "verify2"},
			"OutputsNoSkip":   {Outputs: map[string]any{"a": 1}},
			"HostileStage":    {FromStage: "a:b{c}"},
			"FromStartAndSkp": {FromCheckpoint: new(bool), SkipStage: true},
		} {
			req.Reason = "x"
			_, err := b.coord.Retry(ctx, "t-1", req, anyone)
			if !errors.Is(err, facade.ErrInvalid) {
				t.Fatalf("%s: %v, want ErrInvalid", name, err)
			}
		}
		_, err := b.coord.Retry(ctx, "t-{1}", facade.RetryRequest{Reason: "x"}, anyone)
		mustCode(t, err, facade.ErrInvalid)
		_, err = b.coord.Retry(ctx, "t-unknown", facade.RetryRequest{Reason: "x"}, anyone)
		mustCode(t, err, facade.ErrNotFound)
	})
}

func TestRetryRefusedWhileRunning(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		b.create(spec([]task.StageSpec{gateStage("hold")}, "t-run"))
		b.gates.wait(t, "t-run", "hold")
		_, err := b.coord.Retry(ctx, "t-run", facade.RetryRequest{Reason: "x"}, anyone)
		mustCode(t, err, facade.ErrTaskRunning)
		_, err = b.second("coord-b").Retry(ctx, "t-run", facade.RetryRequest{Reason: "x"}, anyone)
		mustCode(t, err, facade.ErrTaskRunning)
		b.gates.release("t-run", "hold")
		b.waitTask(b.coord, "t-run", task.StatusCompleted)
	})
}

// TestConcurrentRetries: two operators retry the same failed task at once
// on two instances; exactly one wins.
func TestConcurrentRetries(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		b.failLast("t-1")
		b.target.script("t-1", "verify", 200)
		coords := []*facade.Coordinator{b.coord, b.second("coord-b"), b.second("coord-c"), b.second("coord-d")}
		var wg sync.WaitGroup
		errs := make([]error, len(coords))
		start := make(chan struct{})
		for i, c := range coords {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = c.Retry(ctx, "t-1", facade.RetryRequest{ExpectedAttempt: 1, Reason: "race"}, anyone)
			}()
		}
		close(start)
		wg.Wait()
		wins := 0
		for _, err := range errs {
			switch {
			case err == nil:
				wins++
			case errors.Is(err, facade.ErrTaskRunning), errors.Is(err, facade.ErrAttemptMismatch), errors.Is(err, facade.ErrTaskCompleted):
			default:
				t.Fatalf("unexpected error: %v", err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d retries won, want exactly 1 (%v)", wins, errs)
		}
		v := b.waitTask(b.coord, "t-1", task.StatusCompleted)
		if v.Attempt != 2 || b.target.count("t-1", "verify") != 2 {
			t.Fatalf("attempt %d, verify calls %d", v.Attempt, b.target.count("t-1", "verify"))
		}
	})
}

// TestRestartAnswersFromRedis: a new process (new client, new store, new
// coordinator) answers every query the same.
func TestRestartAnswersFromRedis(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		v := b.failLast("t-bad", "t-ok")

		client := redistest.Clone(t, b.client)
		store, err := repository.NewRedis(client, repository.Config{Prefix: b.prefix})
		if err != nil {
			t.Fatal(err)
		}
		keys := store.Keys()
		locks, err := redislock.New(client, redislock.Config{Lease: 5 * time.Second,
			LockKey:  func(tn string) string { k, _ := keys.Lock(tn); return k },
			FenceKey: func(tn string) string { k, _ := keys.Fence(tn); return k }})
		if err != nil {
			t.Fatal(err)
		}
		cfg := b.cfg
		cfg.Instance = "coord-new"
		fresh, err := facade.New(store, locks, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range []string{"t-bad", "t-ok"} {
			before, _ := b.coord.TaskByTenant(ctx, tn)
			after, err := fresh.TaskByTenant(ctx, tn)
			if err != nil {
				t.Fatal(err)
			}
			if after.Status != before.Status || after.Seq != before.Seq || after.LastError != before.LastError ||
				after.Checkpoint.LastCompletedStageIndex != before.Checkpoint.LastCompletedStageIndex {
				t.Fatalf("%s: before %+v after %+v", tn, before.Task, after.Task)
			}
			tl1, _ := b.coord.Timeline(ctx, tn, 0)
			tl2, _ := fresh.Timeline(ctx, tn, 0)
			if !slices.Equal(eventTypes(tl1.Events), eventTypes(tl2.Events)) || tl1.TaskID != after.ID || tl2.TaskID != after.ID {
				t.Fatalf("timeline differs: %v vs %v", eventTypes(tl1.Events), eventTypes(tl2.Events))
			}
			h, err := fresh.History(ctx, tn, 0)
			if err != nil || len(h) != 1 || h[0].ID != after.ID {
				t.Fatalf("history %v %v", h, err)
			}
			if ok, err := fresh.HasCheckpoint(ctx, tn); err != nil || !ok {
				t.Fatalf("hasCheckpoint %v %v", ok, err)
			}
		}
		pv, err := fresh.Plan(ctx, v.ID)
		if err != nil || pv.Status != plan.StatusFailed || pv.Counts[task.StatusFailed] != 1 || pv.Counts[task.StatusCompleted] != 1 {
			t.Fatalf("plan from a new process: %+v %v", pv, err)
		}
		ts, next, err := fresh.PlanTasks(ctx, v.ID, plan.TaskFilter{Status: task.StatusFailed})
		if err != nil || len(ts) != 1 || ts[0].TenantID != "t-bad" || next != "" {
			t.Fatalf("failed tasks: %v %q %v", ts, next, err)
		}
		// And the new process can retry what the old one failed.
		b.target.script("t-bad", "verify", 200)
		if _, err := fresh.Retry(ctx, "t-bad", facade.RetryRequest{Reason: "after restart"}, anyone); err != nil {
			t.Fatal(err)
		}
		b.waitTask(fresh, "t-bad", task.StatusCompleted)
		if err := fresh.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestShutdownAfterBeginPausesEndedRuns: cmd/deploycoord calls
// BeginShutdown on SIGTERM and Shutdown only after draining HTTP; a plan
// run that ended in between (its tasks paused at their boundary) has left
// the coordinator's runs, yet Shutdown still pauses its plan (plan-owner
// mode), so it does not stay RUNNING with no runner.
func TestShutdownAfterBeginPausesEndedRuns(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		s := spec([]task.StageSpec{gateStage("hold"), noopStage("after")}, "sb-1", "sb-2")
		s.MaxConcurrency = 2
		v := b.create(s)
		b.gates.wait(t, "sb-1", "hold")
		b.gates.wait(t, "sb-2", "hold")
		b.coord.BeginShutdown()
		b.gates.openAll()
		for _, tn := range []string{"sb-1", "sb-2"} {
			if tv := b.waitTask(b.coord, tn, task.StatusPaused); tv.Reason != facade.ReasonShutdown {
				t.Fatalf("%s paused for %q", tn, tv.Reason)
			}
		}
		// Every run and the plan run ended: Shutdown no longer finds them.
		ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
		defer icancel()
		if err := b.coord.Idle(ictx); err != nil {
			t.Fatalf("runs still going after BeginShutdown: %v", err)
		}
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := b.coord.Shutdown(gctx); err != nil {
			t.Fatal(err)
		}
		if pv, _ := b.coord.Plan(ctx, v.ID); pv.Status != plan.StatusPaused || pv.Reason != facade.ReasonShutdown {
			t.Fatalf("plan after shutdown: %s %q; want PAUSED %q", pv.Status, pv.Reason, facade.ReasonShutdown)
		}
	})
}

// TestShutdownLeavesTasksPaused: stages still running when the grace period
// ends are interrupted; their tasks are PAUSED "instance shutdown" with the
// locks released, the plan is paused, and another instance resumes it.
func TestShutdownLeavesTasksPaused(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		s := spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{}), gateStage("hold"), b.httpStage("verify", task.RetryPolicy{})}, "t-1", "t-2", "t-3")
		s.MaxConcurrency = 2
		v := b.create(s)
		b.gates.wait(t, "t-1", "hold")
		b.gates.wait(t, "t-2", "hold")
		gctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := b.coord.Shutdown(gctx)
		cancel()
		if err == nil {
			t.Fatal("shutdown with stuck stages should report the grace period ran out")
		}
		for _, tn := range []string{"t-1", "t-2"} {
			tv, _ := b.coord.TaskByTenant(ctx, tn)
			if tv.Status != task.StatusPaused || tv.Reason != facade.ReasonShutdown || tv.Checkpoint.LastCompletedStageIndex != 0 {
				t.Fatalf("%s after shutdown: %s %q %+v", tn, tv.Status, tv.Reason, tv.Checkpoint)
			}
			if info, _ := b.coord.Lock(ctx, tn); info.Held {
				t.Fatalf("%s lock still held after shutdown", tn)
			}
		}
		if tv, _ := b.coord.TaskByTenant(ctx, "t-3"); tv.Status != task.StatusPending {
			t.Fatalf("t-3 should not have started: %s", tv.Status)
		}
		pv, _ := b.coord.Plan(ctx, v.ID)
		if pv.Status != plan.StatusPaused || pv.Reason != facade.ReasonShutdown {
			t.Fatalf("plan after shutdown: %s %q", pv.Status, pv.Reason)
		}
		_, err = b.coord.CreatePlan(ctx, s, anyone)
		mustCode(t, err, facade.ErrShuttingDown)

		other := b.second("coord-b")
		b.gates.openAll()
		if _, err := other.ResumePlan(ctx, v.ID, facade.ResumeOptions{Reason: "after deploy"}, anyone); err != nil {
			t.Fatal(err)
		}
		done := b.waitPlan(other, v.ID, plan.StatusCompleted)
		if done.Owner != "coord-b" || done.Counts[task.StatusCompleted] != 3 {
			t.Fatalf("resumed plan %+v %v", done.Plan, done.Counts)
		}
		for _, tn := range []string{"t-1", "t-2", "t-3"} {
			if b.target.count(tn, "push") != 1 || b.target.count(tn, "verify") != 1 {
				t.Fatalf("%s: stages ran twice or not at all: push %d verify %d", tn, b.target.count(tn, "push"), b.target.count(tn, "verify"))
			}
		}
	})
}

// TestCancelPlan: pending tasks are cancelled at once, running ones at the
// next boundary; the plan stays CANCELLED.
func TestCancelPlan(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		s := spec([]task.StageSpec{gateStage("hold"), b.httpStage("verify", task.RetryPolicy{})}, "t-1", "t-2", "t-3")
		s.MaxConcurrency = 1
		v := b.create(s)
		b.gates.wait(t, "t-1", "hold")
		pv, err := b.coord.CancelPlan(ctx, v.ID, "INC-3 abort", anyone)
		if err != nil || pv.Status != plan.StatusCancelled {
			t.Fatalf("cancel: %+v %v", pv.Plan, err)
		}
		b.gates.release("t-1", "hold")
		for _, tn := range []string{"t-1", "t-2", "t-3"} {
			b.waitTask(b.coord, tn, task.StatusCancelled)
		}
		b.idle(b.coord)
		pv, _ = b.coord.Plan(ctx, v.ID)
		if pv.Status != plan.StatusCancelled || pv.Counts[task.StatusCancelled] != 3 {
			t.Fatalf("plan %s %v", pv.Status, pv.Counts)
		}
		if b.target.count("t-1", "verify") != 0 {
			t.Fatal("a stage ran after the cancel")
		}
		_, err = b.coord.PausePlan(ctx, v.ID, "too late", anyone)
		mustCode(t, err, facade.ErrPlanFinished)
	})
}
