package facade_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// selectBarrier is a store whose PlanTasks, for a call whose context carries
// selectKey, waits once it has read until n such calls have read: the
// bulk retries it serves have all made their selection before any of them
// retries a task, so they all select the same tasks at the same attempt.
type selectBarrier struct {
	facade.Store
	wg sync.WaitGroup
}

type selectKey struct{}

func (s *selectBarrier) PlanTasks(ctx context.Context, planID string, f plan.TaskFilter) ([]*task.Task, string, error) {
	ts, next, err := s.Store.PlanTasks(ctx, planID, f)
	if ctx.Value(selectKey{}) != nil {
		s.wg.Done()
		s.wg.Wait()
	}
	return ts, next, err
}

// TestRetryPlanTwoOperators sends the same bulk retry of a plan's 50 FAILED
// tenants from two operators on two instances at once, both having selected
// every tenant at the same attempt: every tenant is retried exactly once
// overall, and the call that did not retry it lists it as skipped with the
// reason. "StillFailing": each retried task fails again at once, so the
// second call finds it FAILED again (at the next attempt) — it must not
// retry it a second time.
func TestRetryPlanTwoOperators(t *testing.T) {
	t.Parallel()
	for _, variant := range []struct {
		name   string
		status int
		final  task.Status
		plan   plan.Status
	}{
		{"TargetFixed", 200, task.StatusCompleted, plan.StatusCompleted},
		{"StillFailing", 500, task.StatusFailed, plan.StatusFailed},
	} {
		t.Run(variant.name, func(t *testing.T) {
			t.Parallel()
			forBackends(t, func(t *testing.T, be redistest.Backend) {
				testRetryPlanTwoOperators(t, be, variant.status, variant.final, variant.plan)
			})
		})
	}
}

func testRetryPlanTwoOperators(t *testing.T, be redistest.Backend, status int, final task.Status, finalPlan plan.Status) {
	b := setup(t, be)
	ctx := context.Background()
	const n = 50
	tenants := make([]string, n)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("t-%03d", i)
		b.target.script(tenants[i], "push", 500)
	}
	s := spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{})}, tenants...)
	s.MaxConcurrency = 10
	v := b.create(s)
	b.waitPlan(b.coord, v.ID, plan.StatusFailed)
	b.idle(b.coord)
	for _, tn := range tenants {
		b.target.script(tn, "push", status)
	}

	bs := &selectBarrier{Store: b.store}
	bs.wg.Add(2)
	coords := make([]*facade.Coordinator, 2)
	for i, name := range []string{"coord-x", "coord-y"} {
		cfg := b.cfg
		cfg.Instance = name
		c, err := facade.New(bs, b.locks, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Shutdown(ctx)
		})
		coords[i] = c
	}
	req := facade.PlanRetryRequest{Statuses: []task.Status{task.StatusFailed}, Reason: "INC-11 target back"}
	results := make([]facade.PlanRetryResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, c := range coords {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := anyone
			a.Name = fmt.Sprintf("sre-%d", i)
			results[i], errs[i] = c.RetryPlan(context.WithValue(ctx, selectKey{}, i), v.ID, req, a)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	retriedBy := map[string]int{}
	for i, res := range results {
		if res.Selected != n {
			t.Fatalf("call %d selected %d tasks, want %d (both select before either retries)", i, res.Selected, n)
		}
		if len(res.Retried)+len(res.Skipped) != n {
			t.Fatalf("call %d: %d retried + %d skipped, want %d", i, len(res.Retried), len(res.Skipped), n)
		}
		for _, tn := range res.Retried {
			retriedBy[tn]++
		}
		for _, sk := range res.Skipped {
			if !slices.Contains(tenants, sk.TenantID) || sk.TaskID == "" {
				t.Errorf("call %d skipped %+v", i, sk)
			}
			if !anyOf(sk.Err, facade.ErrTaskRunning, facade.ErrAttemptMismatch, facade.ErrTenantLocked,
				facade.ErrTaskCompleted, facade.ErrInvalidState) {
				t.Errorf("call %d skipped %s with %v, not a refusal of a concurrent retry", i, sk.TenantID, sk.Err)
			}
		}
	}
	for _, tn := range tenants {
		if retriedBy[tn] != 1 {
			t.Errorf("%s retried %d times by the two calls, want exactly once", tn, retriedBy[tn])
		}
	}
	t.Logf("call 0 retried %d, call 1 retried %d", len(results[0].Retried), len(results[1].Retried))

	pv := b.waitPlan(b.coord, v.ID, finalPlan)
	for _, c := range coords {
		b.idle(c)
	}
	for _, tn := range tenants {
		tv := b.waitTask(b.coord, tn, final)
		if tv.Attempt != 2 || b.target.count(tn, "push") != 2 {
			t.Errorf("%s: attempt %d, push called %d times; want 2 and 2 (one retry)", tn, tv.Attempt, b.target.count(tn, "push"))
		}
	}
	pv, err := b.coord.Plan(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if pv.Counts[final] != n || pv.Counts.Total() != n {
		t.Fatalf("counts after the retries: %v, want %d %s", pv.Counts, n, final)
	}
}

func anyOf(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// TestRetryPlanReopensFinishedPlan: a bulk retry of a FAILED plan's failed
// tasks moves the plan back to RUNNING while they run, with exact counts at
// each step, and the plan finishes COMPLETED when they succeed. The
// timeline of each retried task names who retried it and why.
func TestRetryPlanReopensFinishedPlan(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		failing := []string{"t-f1", "t-f2", "t-f3"}
		for _, tn := range failing {
			b.target.script(tn, "push", 500, 200)
		}
		v := b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{}), gateStage("hold")},
			"t-f1", "t-f2", "t-f3", "t-ok"))
		b.gates.release("t-ok", "hold")
		pv := b.waitPlan(b.coord, v.ID, plan.StatusFailed)
		b.idle(b.coord)
		if pv.Counts[task.StatusFailed] != 3 || pv.Counts[task.StatusCompleted] != 1 || pv.FinishedAt.IsZero() {
			t.Fatalf("before the retry: %s %v finished %v", pv.Status, pv.Counts, pv.FinishedAt)
		}

		req := facade.PlanRetryRequest{Statuses: []task.Status{task.StatusFailed}, Reason: "INC-11 push target fixed"}
		res, err := b.coord.RetryPlan(ctx, v.ID, req, anyone)
		if err != nil || res.Selected != 3 || len(res.Retried) != 3 || len(res.Skipped) != 0 {
			t.Fatalf("bulk retry: %+v %v", res, err)
		}
		for _, tn := range failing {
			b.gates.wait(t, tn, "hold")
		}
		pv, err = b.coord.Plan(ctx, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if pv.Status != plan.StatusRunning || !pv.FinishedAt.IsZero() ||
			pv.Counts[task.StatusRunning] != 3 || pv.Counts[task.StatusFailed] != 0 || pv.Counts[task.StatusCompleted] != 1 || pv.Counts.Total() != 4 {
			t.Fatalf("while the retried tasks run: %s %v finished %v; want RUNNING, 3 running, 1 completed", pv.Status, pv.Counts, pv.FinishedAt)
		}
		tl, err := b.coord.Timeline(ctx, "t-f2", 0)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range tl.Events {
			found = found || (ev.Type == task.EventRetryRequested && ev.Actor == anyone.Name && ev.Reason == req.Reason)
		}
		if !found {
			t.Errorf("no %s entry by %s with the reason in the timeline: %+v", task.EventRetryRequested, anyone.Name, tl.Events)
		}

		for _, tn := range failing {
			b.gates.release(tn, "hold")
		}
		pv = b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
		if pv.Counts[task.StatusCompleted] != 4 || pv.Counts.Total() != 4 {
			t.Fatalf("after the retried tasks completed: %v", pv.Counts)
		}
		// Nothing is left to retry: a second bulk retry selects nothing.
		res, err = b.coord.RetryPlan(ctx, v.ID, req, anyone)
		if err != nil || res.Selected != 0 || len(res.Retried) != 0 {
			t.Fatalf("second bulk retry: %+v %v", res, err)
		}
	})
}

// TestRetryPlanOrphaned: "orphaned": true selects the RUNNING tasks whose
// owner instance is gone, and only those; each is taken over from its
// checkpoint.
func TestRetryPlanOrphaned(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		s := spec([]task.StageSpec{noopStage("only")}, "t-lost", "t-idle")
		s.Start = new(false)
		v := b.create(s)
		// The plan and t-lost's task as an instance that died mid-run left
		// them: RUNNING, owned by coord-dead, which no longer heartbeats.
		p, _, err := b.store.Plan(ctx, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(time.Now(), "coord-dead"); err != nil {
			t.Fatal(err)
		}
		if err := b.store.UpdatePlan(ctx, p, plan.StatusCreated); err != nil {
			t.Fatal(err)
		}
		tk, _, err := b.store.TaskByTenant(ctx, "t-lost")
		if err != nil {
			t.Fatal(err)
		}
		prev := tk.Status
		if err := tk.Start(time.Now(), "coord-dead", 7); err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.WriteTask(ctx, task.Write{Task: tk, PrevStatus: prev, ExpectSeq: tk.Seq, Guard: task.Guard{Fence: 7}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, func() error {
			tv, err := b.coord.TaskByTenant(ctx, "t-lost")
			if err != nil || !tv.Orphaned {
				return fmt.Errorf("t-lost orphaned %v, %v", tv.Orphaned, err)
			}
			return nil
		})

		req := facade.PlanRetryRequest{Orphaned: true, Reason: "INC-11 coord-dead is gone"}
		dry := req
		dry.DryRun = true
		res, err := b.coord.RetryPlan(ctx, v.ID, dry, anyone)
		if err != nil || res.Selected != 1 || !slices.Equal(res.Retried, []string{"t-lost"}) {
			t.Fatalf("dry run: %+v %v", res, err)
		}
		res, err = b.coord.RetryPlan(ctx, v.ID, req, anyone)
		if err != nil || res.Selected != 1 || !slices.Equal(res.Retried, []string{"t-lost"}) || len(res.Skipped) != 0 {
			t.Fatalf("bulk retry of the orphaned: %+v %v", res, err)
		}
		tv := b.waitTask(b.coord, "t-lost", task.StatusCompleted)
		if tv.Attempt != 2 || tv.Owner != b.cfg.Instance {
			t.Fatalf("taken over task: attempt %d, owner %s", tv.Attempt, tv.Owner)
		}
		// Nothing is orphaned any more: a second call selects nothing.
		if res, err := b.coord.RetryPlan(ctx, v.ID, req, anyone); err != nil || res.Selected != 0 {
			t.Fatalf("second bulk retry: %+v %v", res, err)
		}
	})
}
