package facade_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestSharedBulkRetryUnderMaxConcurrency: a bulk retry of 10 FAILED tasks
// of a plan with maxConcurrency 2 queues them (PENDING, plan RUNNING
// again) and they run at most 2 at once, across two instances, from their
// checkpoint, to COMPLETED. A second bulk retry retries nothing more.
func TestSharedBulkRetryUnderMaxConcurrency(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		other := b.second("coord-b")
		ctx := context.Background()
		tr := newTracker(t, 40*time.Millisecond)
		ts := tenants(10)
		for _, tn := range ts {
			b.target.script(tn, "check", http.StatusBadRequest, http.StatusOK)
		}
		s := spec([]task.StageSpec{noopStage("prepare"), b.httpStage("check", task.RetryPolicy{}), tr.stage("deploy")}, ts...)
		s.MaxConcurrency = 2
		v := b.create(s)
		b.waitPlan(b.coord, v.ID, plan.StatusFailed)
		if _, calls := tr.stats(); calls != 0 {
			t.Fatalf("deploy called %d times before the retry", calls)
		}
		res, err := other.RetryPlan(ctx, v.ID, facade.PlanRetryRequest{Statuses: []task.Status{task.StatusFailed}, Reason: "fixed the check"}, anyone)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Retried) != 10 || len(res.Skipped) != 0 {
			t.Fatalf("retried %v, skipped %v", res.Retried, res.Skipped)
		}
		again, err := b.coord.RetryPlan(ctx, v.ID, facade.PlanRetryRequest{Statuses: []task.Status{task.StatusFailed}, Reason: "twice"}, anyone)
		if err != nil || len(again.Retried) != 0 {
			t.Fatalf("second bulk retry: %+v %v", again, err)
		}
		b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
		top, calls := tr.stats()
		if top > 2 || calls != 10 {
			t.Fatalf("deploy: %d calls, %d at once; want 10, at most 2", calls, top)
		}
		for _, tn := range ts {
			if n := b.target.count(tn, "check"); n != 2 {
				t.Fatalf("tenant %s: check called %d times, want 2", tn, n)
			}
			tv, err := b.coord.TaskByTenant(ctx, tn)
			if err != nil {
				t.Fatal(err)
			}
			if tv.Status != task.StatusCompleted || tv.Attempt != 2 {
				t.Fatalf("tenant %s: %s attempt %d", tn, tv.Status, tv.Attempt)
			}
		}
		pv, err := b.coord.Plan(ctx, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if pv.Counts[task.StatusCompleted] != 10 || pv.Counts[task.StatusFailed] != 0 || pv.Counts[task.StatusPending] != 0 {
			t.Fatalf("counts %v", pv.Counts)
		}
		b.idle(b.coord)
		b.idle(other)
		if q, h := queueState(t, b, v.ID); len(q) != 0 || len(h) != 0 {
			t.Fatalf("left queued %v, held %v", q, h)
		}
	})
}

// TestSharedRetryAnswersPending: a retry in shared mode answers the task
// PENDING on its new attempt (it waits for a permit), with the retry's
// timeline entry; a dry run changes nothing.
func TestSharedRetryAnswersPending(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		ctx := context.Background()
		b.target.script("tenant-r", "check", http.StatusBadRequest, http.StatusOK)
		s := spec([]task.StageSpec{noopStage("prepare"), b.httpStage("check", task.RetryPolicy{})}, "tenant-r")
		v := b.create(s)
		b.waitPlan(b.coord, v.ID, plan.StatusFailed)
		dry, err := b.coord.Retry(ctx, "tenant-r", facade.RetryRequest{Reason: "look", DryRun: true}, anyone)
		if err != nil || dry.Task != nil || len(dry.WouldRun) != 1 {
			t.Fatalf("dry run %+v %v", dry, err)
		}
		if tv := b.waitTask(b.coord, "tenant-r", task.StatusFailed); tv.Attempt != 1 {
			t.Fatalf("dry run changed the task: %+v", tv)
		}
		res, err := b.coord.Retry(ctx, "tenant-r", facade.RetryRequest{Reason: "fixed"}, anyone)
		if err != nil {
			t.Fatal(err)
		}
		if res.Task == nil || res.Task.Status != task.StatusPending || res.Task.Attempt != 2 || res.Task.StageName != "check" {
			t.Fatalf("answer %+v", res.Task)
		}
		b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
		if n := b.target.count("tenant-r", "check"); n != 2 {
			t.Fatalf("check called %d times", n)
		}
	})
}
