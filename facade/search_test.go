package facade_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestSearchTasks: failed tasks and a hung stage across two plans, found
// by one query ("failed or stuck"); a hung stage on a live instance is not
// orphaned; the long-stage gauge counts it once it passed half its timeout.
func TestSearchTasks(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		var offset atomic.Int64
		b := setup(t, be, withConfig(func(c *facade.Config) {
			c.Clock = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
		}))
		ctx := context.Background()
		b.target.script("s-bad", "push", 500)
		a := b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{})}, "s-bad", "s-ok"))
		b.waitPlan(b.coord, a.ID, plan.StatusFailed)
		hang := gateStage("hang")
		hung := b.create(spec([]task.StageSpec{noopStage("prepare"), hang}, "s-hung"))
		b.gates.wait(t, "s-hung", "hang")

		search := func(q facade.TaskQuery) []string {
			t.Helper()
			page, err := b.coord.SearchTasks(ctx, q)
			if err != nil {
				t.Fatalf("SearchTasks(%+v): %v", q, err)
			}
			if page.NextCursor != "" || page.Degraded {
				t.Fatalf("SearchTasks(%+v): next %q, degraded %v", q, page.NextCursor, page.Degraded)
			}
			var out []string
			for _, v := range page.Tasks {
				out = append(out, v.TenantID)
			}
			return out
		}
		same := func(got []string, want ...string) bool {
			if len(got) != len(want) {
				return false
			}
			for i := range got {
				if got[i] != want[i] {
					return false
				}
			}
			return true
		}
		failed := []task.Status{task.StatusFailed}
		if got := search(facade.TaskQuery{Statuses: failed}); !same(got, "s-bad") {
			t.Errorf("FAILED = %v", got)
		}
		// Any time at all: the hung stage; newest first.
		if got := search(facade.TaskQuery{Statuses: failed, RunningLongerThan: time.Nanosecond}); !same(got, "s-hung", "s-bad") {
			t.Errorf("FAILED or running > 1ns = %v, want [s-hung s-bad]", got)
		}
		if got := search(facade.TaskQuery{RunningLongerThan: time.Nanosecond, Stage: "hang"}); !same(got, "s-hung") {
			t.Errorf("running > 1ns at stage hang = %v", got)
		}
		if got := search(facade.TaskQuery{RunningLongerThan: time.Nanosecond, Stage: "push"}); !same(got) {
			t.Errorf("running > 1ns at stage push = %v, want none", got)
		}
		if got := search(facade.TaskQuery{RunningLongerThan: time.Hour}); !same(got) {
			t.Errorf("running > 1h = %v, want none", got)
		}
		// Its owner is alive: not orphaned.
		if got := search(facade.TaskQuery{Orphaned: true}); !same(got) {
			t.Errorf("orphaned = %v, want none", got)
		}
		if got := search(facade.TaskQuery{Statuses: failed, PlanID: hung.ID}); !same(got) {
			t.Errorf("FAILED of the hung plan = %v, want none", got)
		}
		if got := search(facade.TaskQuery{Statuses: []task.Status{task.StatusCompleted, task.StatusFailed}, PlanID: a.ID}); !same(got, "s-bad", "s-ok") && !same(got, "s-ok", "s-bad") {
			t.Errorf("COMPLETED|FAILED of plan A = %v", got)
		}
		v, err := b.coord.TaskByTenant(ctx, "s-hung")
		if err != nil || v.StageStartedAt.IsZero() || v.StageName != "hang" {
			t.Fatalf("hung task: stage %q started %v (%v)", v.StageName, v.StageStartedAt, err)
		}

		for _, q := range []facade.TaskQuery{
			{Statuses: []task.Status{"failed"}}, {PlanID: "plan-{x}"}, {Stage: "a:b"}, {RunningLongerThan: -time.Second},
			{RunningLongerThan: 25 * time.Hour}, {Limit: plan.LimitMax + 1}, {Limit: -1}, {Cursor: "1~task-*"},
		} {
			_, err := b.coord.SearchTasks(ctx, q)
			mustCode(t, err, facade.ErrInvalid)
		}

		// The gauge: the stage (default timeout 5m) passes half its timeout.
		if n := b.coord.LongStages(); n != 0 {
			t.Errorf("long stages = %d at start", n)
		}
		offset.Store(int64(task.TimeoutDefault/2 + time.Second))
		n := b.coord.LongStages()
		offset.Store(0)
		if n != 1 {
			t.Errorf("long stages = %d past half the timeout, want 1", n)
		}
		b.gates.release("s-hung", "hang")
		b.waitPlan(b.coord, hung.ID, plan.StatusCompleted)
		b.idle(b.coord)
		offset.Store(int64(task.TimeoutDefault))
		n = b.coord.LongStages()
		offset.Store(0)
		if n != 0 {
			t.Errorf("long stages = %d after the stage ended", n)
		}
		if got := search(facade.TaskQuery{RunningLongerThan: time.Nanosecond}); !same(got) {
			t.Errorf("running > 1ns after the end = %v", got)
		}
	})
}

// TestSearchTasksOrphanedUnion: a task RUNNING on an instance that died is
// orphaned: found by orphaned, not by runningLongerThan (that is for live
// instances), and with FAILED tasks by the union of both.
func TestSearchTasksOrphanedUnion(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		b.target.script("o-bad", "push", 500)
		failed := b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{})}, "o-bad"))
		b.waitPlan(b.coord, failed.ID, plan.StatusFailed)
		s := spec([]task.StageSpec{noopStage("prepare")}, "o-dead")
		no := false
		s.Start = &no
		held := b.create(s)
		// The task as an instance that died mid-stage left it: RUNNING, its
		// owner gone, its heartbeat long past.
		ts, _, err := b.store.PlanTasks(ctx, held.ID, plan.TaskFilter{})
		if err != nil || len(ts) != 1 {
			t.Fatalf("tasks of the held plan: %v, %v", ts, err)
		}
		tk := ts[0]
		long := time.Now().Add(-time.Hour)
		if err := tk.Start(long, "coord-dead", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.WriteTask(ctx, task.Write{Task: tk, PrevStatus: task.StatusPending, ExpectSeq: tk.Seq, Guard: task.Guard{Fence: 1}}); err != nil {
			t.Fatal(err)
		}
		search := func(q facade.TaskQuery) map[string]bool {
			t.Helper()
			page, err := b.coord.SearchTasks(ctx, q)
			if err != nil {
				t.Fatalf("SearchTasks(%+v): %v", q, err)
			}
			out := map[string]bool{}
			for _, v := range page.Tasks {
				out[v.TenantID] = v.Orphaned
			}
			return out
		}
		if got := search(facade.TaskQuery{Orphaned: true}); len(got) != 1 || !got["o-dead"] {
			t.Errorf("orphaned = %v, want o-dead (orphaned)", got)
		}
		if got := search(facade.TaskQuery{RunningLongerThan: time.Minute}); len(got) != 0 {
			t.Errorf("running > 1m = %v: an orphaned task is not a hung stage", got)
		}
		got := search(facade.TaskQuery{Statuses: []task.Status{task.StatusFailed}, Orphaned: true, RunningLongerThan: time.Minute})
		if _, ok := got["o-bad"]; len(got) != 2 || !got["o-dead"] || !ok {
			t.Errorf("failed or stuck = %v, want o-bad and o-dead", got)
		}
	})
}
