package repository

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// searchAll follows the cursor of SearchTasks to the end and returns the
// task ids in order; it fails on a repeated id or a cursor that does not move.
func searchAll(t *testing.T, e *env, f plan.TaskSearch) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		page, next, err := e.store.SearchTasks(ctxT(t), f)
		if err != nil {
			t.Fatalf("SearchTasks(%+v): %v", f, err)
		}
		for _, tk := range page {
			if seen[tk.ID] {
				t.Fatalf("task %s listed twice (page %d)", tk.ID, pages)
			}
			seen[tk.ID] = true
			out = append(out, tk.ID)
		}
		if next == "" {
			return out
		}
		if next == f.Cursor || pages > 1000 {
			t.Fatalf("cursor %q does not advance", next)
		}
		f.Cursor = next
	}
}

// searchFixture: three plans; tasks fail, complete and run at distinct
// times, across plans.
type searchFixture struct {
	plans [3]fixture
	// failed: the failed task ids, newest failure first; completed and
	// running likewise.
	failed, completed, running []string
	// failedAt: the stage each failed task failed at.
	failedAt map[string]string
}

func newSearchFixture(t *testing.T, e *env) searchFixture {
	t.Helper()
	var fx searchFixture
	fx.failedAt = map[string]string{}
	for i := range fx.plans {
		fx.plans[i] = createPlan(t, e, 6, 0)
		e.clock.Add(time.Second)
	}
	fence := int64(10)
	// Round-robin over the plans: task j of plan i fails (j = 0, 1),
	// completes (j = 2) or runs (j = 3); 4 and 5 stay PENDING.
	for j := 0; j < 4; j++ {
		for i := range fx.plans {
			e.clock.Add(time.Second)
			tk := fx.plans[i].tasks[j]
			r := start(t, e, tk, fence)
			fence++
			switch j {
			case 0, 1:
				if j == 1 {
					// It fails at its second stage.
					r.tk.EnterStage(1, stageNames[1], e.clock.Now())
					r.mustWrite(task.StatusRunning, task.Write{})
				}
				r.fail("boom")
				fx.failed = append([]string{tk.ID}, fx.failed...)
				fx.failedAt[tk.ID] = r.tk.StageName
			case 2:
				r.complete()
				fx.completed = append([]string{tk.ID}, fx.completed...)
			case 3:
				fx.running = append([]string{tk.ID}, fx.running...)
			}
		}
	}
	return fx
}

func TestSearchTasks(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := newSearchFixture(t, e)

		// Newest first across plans, whatever the page size.
		for _, limit := range []int{1, 2, 5, 100} {
			got := searchAll(t, e, plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}, Limit: limit})
			if !slices.Equal(got, fx.failed) {
				t.Fatalf("limit %d: FAILED = %v, want %v", limit, got, fx.failed)
			}
		}
		// A union of statuses, in one order.
		got := searchAll(t, e, plan.TaskSearch{Statuses: []task.Status{task.StatusCompleted, task.StatusFailed}, Limit: 3})
		if len(got) != len(fx.failed)+len(fx.completed) {
			t.Fatalf("FAILED|COMPLETED = %d tasks, want %d", len(got), len(fx.failed)+len(fx.completed))
		}
		for _, id := range fx.completed {
			if !slices.Contains(got, id) {
				t.Fatalf("FAILED|COMPLETED misses completed %s", id)
			}
		}
		// Narrowed to a plan.
		p1 := fx.plans[1].plan.ID
		got = searchAll(t, e, plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}, PlanID: p1, Limit: 1})
		want := slices.DeleteFunc(slices.Clone(fx.failed), func(id string) bool {
			return !slices.ContainsFunc(fx.plans[1].tasks, func(tk *task.Task) bool { return tk.ID == id })
		})
		if len(want) != 2 || !slices.Equal(got, want) {
			t.Fatalf("FAILED of plan %s = %v, want %v", p1, got, want)
		}
		// Narrowed to a stage.
		got = searchAll(t, e, plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}, Stage: stageNames[1], Limit: 2})
		var atStage []string
		for _, id := range fx.failed {
			if fx.failedAt[id] == stageNames[1] {
				atStage = append(atStage, id)
			}
		}
		if len(atStage) != 3 || !slices.Equal(got, atStage) {
			t.Fatalf("FAILED at %s = %v, want %v", stageNames[1], got, atStage)
		}
		// Since: only the failures of the last round.
		page, _, err := e.store.SearchTasks(ctx, plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}, Since: e.clock.Now().Add(-8 * time.Second)})
		if err != nil || len(page) != 3 {
			t.Fatalf("FAILED since -8s = %d tasks (%v), want 3", len(page), err)
		}
		// Match: the RUNNING tasks it keeps, as a union with the statuses.
		oldest := fx.running[len(fx.running)-1]
		match := func(tk *task.Task) bool { return tk.ID == oldest }
		got = searchAll(t, e, plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}, Match: match, Limit: 4})
		if len(got) != len(fx.failed)+1 || !slices.Contains(got, oldest) {
			t.Fatalf("FAILED or matched = %v, want the failed and %s", got, oldest)
		}
		got = searchAll(t, e, plan.TaskSearch{Match: match})
		if !slices.Equal(got, []string{oldest}) {
			t.Fatalf("matched = %v, want [%s]", got, oldest)
		}
		// No filter: every task, each once.
		got = searchAll(t, e, plan.TaskSearch{Limit: 7})
		if len(got) != 18 {
			t.Fatalf("every task = %d, want 18", len(got))
		}
		// PENDING, running.
		if got := searchAll(t, e, plan.TaskSearch{Statuses: []task.Status{task.StatusPending}}); len(got) != 6 {
			t.Fatalf("PENDING = %d, want 6", len(got))
		}
		if got := searchAll(t, e, plan.TaskSearch{Statuses: []task.Status{task.StatusRunning}}); !slices.Equal(got, fx.running) {
			t.Fatalf("RUNNING = %v, want %v", got, fx.running)
		}
	})
}

// TestSearchTasksRetried: a task that leaves a status leaves its index;
// one that comes back is found at its new time, once.
func TestSearchTasksRetried(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		fx := newSearchFixture(t, e)
		failed := fx.failed[len(fx.failed)-1] // the oldest failure
		var tk *task.Task
		for _, p := range fx.plans {
			for _, x := range p.tasks {
				if x.ID == failed {
					tk = x
				}
			}
		}
		stored, _, err := e.store.Task(ctxT(t), tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Add(time.Second)
		r, _ := rerun(t, e, stored, 100, "coord-b")
		got := searchAll(t, e, plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}, Limit: 2})
		if slices.Contains(got, failed) || len(got) != len(fx.failed)-1 {
			t.Fatalf("FAILED after a retry = %v: %s must be gone", got, failed)
		}
		got = searchAll(t, e, plan.TaskSearch{Statuses: []task.Status{task.StatusRunning}, Limit: 2})
		if len(got) == 0 || got[0] != failed {
			t.Fatalf("RUNNING = %v, want the retried %s first", got, failed)
		}
		e.clock.Add(time.Second)
		r.fail("again")
		got = searchAll(t, e, plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}, Limit: 2})
		if len(got) != len(fx.failed) || got[0] != failed {
			t.Fatalf("FAILED after a second failure = %v, want %s first", got, failed)
		}
	})
}

// TestSearchTasksCursorUnderWrites: tasks failing between two pages do not
// shift the second page: it continues below the first one, nothing twice,
// nothing older skipped.
func TestSearchTasksCursorUnderWrites(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		fx := newSearchFixture(t, e)
		f := plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}, Limit: 2}
		page1, next, err := e.store.SearchTasks(ctxT(t), f)
		if err != nil || len(page1) != 2 || next == "" {
			t.Fatalf("page 1: %d tasks, next %q, %v", len(page1), next, err)
		}
		// Two more failures, newer than everything.
		for i := range 2 {
			e.clock.Add(time.Second)
			start(t, e, fx.plans[i].tasks[4], int64(200+i)).fail("late")
		}
		f.Cursor = next
		rest := searchAll(t, e, f)
		got := append([]string{page1[0].ID, page1[1].ID}, rest...)
		if !slices.Equal(got, fx.failed) {
			t.Fatalf("pages under writes = %v, want %v", got, fx.failed)
		}
	})
}

func TestSearchTasksRefusesBadInput(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		bad := []plan.TaskSearch{
			{Statuses: []task.Status{"failed"}},
			{Statuses: []task.Status{"FAILED*"}},
			{PlanID: "plan-{x}"},
			{PlanID: "plan:*"},
			{Stage: "a b"},
			{Stage: "x\n"},
			{Limit: -1},
			{Limit: plan.LimitMax + 1},
			{Cursor: "abc"},
			{Cursor: "12~task-{x}"},
			{Cursor: "-5~" + task.NewID(t0)},
			{Cursor: "012~" + task.NewID(t0)},
			{Cursor: "1~" + task.NewID(t0) + "~x"},
			{Cursor: strings.Repeat("9", 30) + "~" + task.NewID(t0)},
		}
		for _, f := range bad {
			_, _, err := e.store.SearchTasks(ctxT(t), f)
			if !errors.Is(err, plan.ErrInvalid) {
				t.Errorf("SearchTasks(%+v) = %v, want plan.ErrInvalid", f, err)
			}
		}
	})
}

// TestSearchTasksRoundTrips: a page is three round trips (the plans
// indexes, the plans' indexes, the records), two with a plan id; a stage
// transition stays one.
func TestSearchTasksRoundTrips(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		fx := newSearchFixture(t, e)
		ctx := ctxT(t)
		if err := e.redis.Preload(ctx); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			f    plan.TaskSearch
			want int64
		}{
			{plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}, Limit: 4}, 3},
			{plan.TaskSearch{Statuses: []task.Status{task.StatusFailed, task.StatusRunning}}, 3},
			{plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}, PlanID: fx.plans[0].plan.ID}, 2},
		} {
			before := e.counter.RoundTrips()
			if _, _, err := e.store.SearchTasks(ctx, tc.f); err != nil {
				t.Fatal(err)
			}
			if got := e.counter.RoundTrips() - before; got != tc.want {
				t.Errorf("SearchTasks(%+v): %d round trips, want %d", tc.f, got, tc.want)
			}
		}
		// A stage transition of a RUNNING task and a status change: one each.
		tk := fx.plans[0].tasks[3]
		stored, _, err := e.store.Task(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		r := &runner{t: t, e: e, tk: stored, guard: task.Guard{LockValue: e.lockValue(tk.TenantID), Fence: stored.Fence}}
		before := e.counter.RoundTrips()
		r.tk.EnterStage(1, stageNames[1], e.clock.Now())
		r.mustWrite(task.StatusRunning, task.Write{})
		r.fail("boom")
		if got := e.counter.RoundTrips() - before; got != 2 {
			t.Errorf("a stage transition and a failure: %d round trips, want 2", got)
		}
	})
}

// TestSearchTasksPrunesEmptyPlans: a plan whose index of a status emptied
// leaves the plans index of that status once it is older than pruneAfter.
func TestSearchTasksPrunesEmptyPlans(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 2, 0)
		r := start(t, e, fx.tasks[0], 1)
		r.complete()
		key, _ := e.redis.Keys().PlansByStatus(task.StatusRunning)
		if _, err := e.client.ZScore(ctx, key, fx.plan.ID).Result(); err != nil {
			t.Fatalf("plan not in %s: %v", key, err)
		}
		f := plan.TaskSearch{Statuses: []task.Status{task.StatusRunning}}
		if page, _, err := e.store.SearchTasks(ctx, f); err != nil || len(page) != 0 {
			t.Fatalf("RUNNING = %d, %v", len(page), err)
		}
		if _, err := e.client.ZScore(ctx, key, fx.plan.ID).Result(); err != nil {
			t.Fatalf("plan pruned before pruneAfter: %v", err)
		}
		e.clock.Add(pruneAfter + time.Second)
		if _, _, err := e.store.SearchTasks(ctx, f); err != nil {
			t.Fatal(err)
		}
		if n, _ := e.client.ZCard(ctx, key).Result(); n != 0 {
			t.Fatalf("%s holds %d plans after the prune, want 0", key, n)
		}
		// The plan comes back with its next running task.
		start(t, e, fx.tasks[1], 2)
		if page, _, err := e.store.SearchTasks(ctx, f); err != nil || len(page) != 1 {
			t.Fatalf("RUNNING after a new start = %d, %v", len(page), err)
		}
	})
}

// TestSearchTasksRepairReindexes: a plan without status indexes (created
// before them) is not found; RepairCounts builds them from the ledger, and
// a RUNNING task is then a candidate for runningLongerThan however recent
// the repair.
func TestSearchTasksRepairReindexes(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 4, 0)
		start(t, e, fx.tasks[0], 1).fail("boom")
		start(t, e, fx.tasks[1], 2)
		// The plan as a previous version left it: no search indexes.
		sk := e.redis.keys.statusKeys(fx.plan.ID)
		e.client.Del(ctx, sk[0], sk[1], sk[2], sk[3], sk[4], sk[5])
		for _, s := range task.Statuses {
			k, _ := e.redis.Keys().PlansByStatus(s)
			e.client.Del(ctx, k)
		}
		failed := plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}}
		if got := searchAll(t, e, failed); len(got) != 0 {
			t.Fatalf("FAILED before the repair = %v", got)
		}
		if _, _, err := e.store.RepairCounts(ctx, fx.plan.ID); err != nil {
			t.Fatal(err)
		}
		if got := searchAll(t, e, failed); !slices.Equal(got, []string{fx.tasks[0].ID}) {
			t.Fatalf("FAILED after the repair = %v", got)
		}
		if got := searchAll(t, e, plan.TaskSearch{Statuses: []task.Status{task.StatusPending}}); len(got) != 2 {
			t.Fatalf("PENDING after the repair = %v", got)
		}
		long := plan.TaskSearch{Match: func(*task.Task) bool { return true }, MatchStartedBefore: e.clock.Now().Add(-time.Hour)}
		if got := searchAll(t, e, long); !slices.Equal(got, []string{fx.tasks[1].ID}) {
			t.Fatalf("RUNNING candidates after the repair = %v", got)
		}
	})
}
