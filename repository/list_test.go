package repository

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

func TestPlanTasksPaging(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const n = 3000
		fx := createPlan(t, e, n, 0)
		// Every 100th task completed, every 250th failed, a few left running
		// (two of them silent for long: orphaned).
		want := map[task.Status][]string{}
		status := make([]task.Status, n)
		for i := range status {
			status[i] = task.StatusPending
		}
		for i := 0; i < n; i += 100 {
			start(t, e, fx.tasks[i], 1).complete()
			status[i] = task.StatusCompleted
		}
		for i := 130; i < n; i += 250 {
			start(t, e, fx.tasks[i], 1).fail("boom")
			status[i] = task.StatusFailed
		}
		// Started at t0; 1507 beats at t0+90s, the others stay silent.
		for _, i := range []int{7, 1507, 2999} {
			start(t, e, fx.tasks[i], 1)
			status[i] = task.StatusRunning
		}
		if err := e.store.Beat(ctx, tenantName(1507), fx.tasks[1507].ID, task.Guard{LockValue: "lock-t-01507-1", Fence: 1}, t0.Add(time.Minute+30*time.Second)); err != nil {
			t.Fatal(err)
		}
		for i, s := range status {
			want[s] = append(want[s], fx.tasks[i].ID)
		}

		// Without filter: every task in plan order, limit per page.
		var got []string
		f := plan.TaskFilter{Limit: 250}
		pages := 0
		for {
			page, next, err := e.store.PlanTasks(ctx, fx.plan.ID, f)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if next != "" && len(page) != 250 {
				t.Fatalf("page %d holds %d tasks", pages, len(page))
			}
			for _, tk := range page {
				got = append(got, tk.ID)
			}
			if next == "" {
				break
			}
			f.Cursor = next
		}
		if pages != n/250 || len(got) != n {
			t.Fatalf("%d pages, %d tasks; want %d pages, %d tasks", pages, len(got), n/250, n)
		}
		for i, id := range got {
			if id != fx.tasks[i].ID {
				t.Fatalf("task %d is %s, want %s (plan order)", i, id, fx.tasks[i].ID)
			}
		}
		if page, _, _ := e.store.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{}); len(page) != plan.LimitDefault {
			t.Fatalf("default page holds %d tasks", len(page))
		}
		if page, _, _ := e.store.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{Limit: 100000}); len(page) != plan.LimitMax {
			t.Fatalf("oversized page holds %d tasks, want at most %d", len(page), plan.LimitMax)
		}
		if page, next, err := e.store.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{Cursor: strconv.Itoa(n)}); err != nil || len(page) != 0 || next != "" {
			t.Fatalf("past the end: %d tasks, next %q, %v", len(page), next, err)
		}

		// With a status filter: exactly the matching tasks, in plan order.
		for _, s := range []task.Status{task.StatusCompleted, task.StatusFailed, task.StatusRunning, task.StatusPending, task.StatusPaused} {
			var ids []string
			limit := 7
			if s == task.StatusPending {
				limit = 450
			}
			for _, tk := range allTasks(t, e, fx.plan.ID, plan.TaskFilter{Status: s, Limit: limit}) {
				if tk.Status != s {
					t.Fatalf("filter %s returned a %s task", s, tk.Status)
				}
				ids = append(ids, tk.ID)
			}
			if len(ids) != len(want[s]) {
				t.Fatalf("filter %s: %d tasks, want %d", s, len(ids), len(want[s]))
			}
			for i := range ids {
				if ids[i] != want[s][i] {
					t.Fatalf("filter %s: task %d is %s, want %s", s, i, ids[i], want[s][i])
				}
			}
		}

		// Orphaned: the RUNNING tasks (the coordinator knows which owners live).
		orphans := allTasks(t, e, fx.plan.ID, plan.TaskFilter{Orphaned: true})
		running := allTasks(t, e, fx.plan.ID, plan.TaskFilter{Status: task.StatusRunning})
		if len(orphans) == 0 || !reflect.DeepEqual(ids(orphans), ids(running)) {
			t.Fatalf("orphaned filter %v, want the RUNNING tasks %v", ids(orphans), ids(running))
		}
		if _, _, err := e.store.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{Orphaned: true, Status: task.StatusFailed}); !errors.Is(err, plan.ErrInvalid) {
			t.Fatalf("orphaned FAILED tasks: %v, want plan.ErrInvalid", err)
		}
		for _, c := range []string{"-1", "x", "1.5"} {
			if _, _, err := e.store.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{Cursor: c}); !errors.Is(err, plan.ErrInvalid) {
				t.Fatalf("cursor %q: %v, want plan.ErrInvalid", c, err)
			}
		}
		if _, _, err := e.store.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{Status: "DONE"}); !errors.Is(err, plan.ErrInvalid) {
			t.Fatalf("unknown status: %v", err)
		}
		checkCounts(t, e, fx.plan.ID)
	})
}

func ids(ts []*task.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

// TestPlanTasksFilterScanIsBounded: a filtered page examines at most ScanMax
// entries (lowered here to 300) and hands back a cursor to go on from.
func TestPlanTasksFilterScanIsBounded(t *testing.T) {
	t.Parallel()
	const scanMax = 300
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		if e.redis != nil {
			e.redis.scanMax = scanMax
		} else {
			e.store.(*Memory).scanMax = scanMax
		}
		fx := createPlan(t, e, scanMax+50, 0)
		last := len(fx.tasks) - 1
		start(t, e, fx.tasks[last], 1).complete()
		page, next, err := e.store.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{Status: task.StatusCompleted})
		if err != nil || len(page) != 0 || next != strconv.Itoa(scanMax) {
			t.Fatalf("first page: %d tasks, next %q, %v; want none and cursor %d", len(page), next, err, scanMax)
		}
		page, next, err = e.store.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{Status: task.StatusCompleted, Cursor: next})
		if err != nil || len(page) != 1 || page[0].ID != fx.tasks[last].ID || next != "" {
			t.Fatalf("second page: %v, next %q, %v", ids(page), next, err)
		}
	})
}

// TestPlanTasksTenantPrefix: a tenant id prefix keeps the tasks whose
// tenant starts with it, in plan order, alone or with a status, and pages
// like a status filter.
func TestPlanTasksTenantPrefix(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 300, 0)
		start(t, e, fx.tasks[105], 1).fail("boom")
		start(t, e, fx.tasks[250], 1).fail("boom")
		got := allTasks(t, e, fx.plan.ID, plan.TaskFilter{TenantPrefix: "t-001", Limit: 30})
		if len(got) != 100 || got[0].ID != fx.tasks[100].ID || got[99].ID != fx.tasks[199].ID {
			t.Fatalf("prefix t-001: %d tasks %v..., want tasks 100..199", len(got), ids(got[:min(3, len(got))]))
		}
		failed := allTasks(t, e, fx.plan.ID, plan.TaskFilter{TenantPrefix: "t-001", Status: task.StatusFailed})
		if len(failed) != 1 || failed[0].ID != fx.tasks[105].ID {
			t.Fatalf("prefix t-001 FAILED: %v, want task 105 only", ids(failed))
		}
		if none := allTasks(t, e, fx.plan.ID, plan.TaskFilter{TenantPrefix: "u-"}); len(none) != 0 {
			t.Fatalf("prefix u-: %v, want none", ids(none))
		}
		for _, bad := range []string{"-t", "t*", "t 0", "{t}"} {
			if _, _, err := e.store.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{TenantPrefix: bad}); !errors.Is(err, plan.ErrInvalid) {
				t.Fatalf("prefix %q: %v, want plan.ErrInvalid", bad, err)
			}
		}
	})
}

func TestPlansPaging(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		// 9 plans; three share a millisecond.
		var created []fixture
		for i := 0; i < 9; i++ {
			if i != 4 && i != 5 {
				e.clock.Add(time.Millisecond)
			}
			created = append(created, createPlan(t, e, 1, 0))
		}
		for _, i := range []int{1, 4, 7} {
			start(t, e, created[i].tasks[0], 1).complete()
		}
		// Newest first: by creation time, then by id (descending) within a millisecond.
		var want []string
		for i := 8; i >= 0; i-- {
			want = append(want, created[i].plan.ID)
		}
		// Plans 3, 4 and 5 share a millisecond: descending id order.
		want[3], want[4], want[5] = sortDesc(created[3].plan.ID, created[4].plan.ID, created[5].plan.ID)
		var got []string
		f := plan.ListFilter{Limit: 2}
		for pages := 0; ; pages++ {
			ps, next, err := e.store.Plans(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				got = append(got, p.ID)
			}
			if next == "" {
				break
			}
			if pages > 10 {
				t.Fatal("Plans does not end")
			}
			f.Cursor = next
		}
		if len(got) != len(want) {
			t.Fatalf("listed %v, want %v", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("listed %v, want %v", got, want)
			}
		}
		var done []string
		f = plan.ListFilter{Status: plan.StatusCompleted, Limit: 2}
		for {
			ps, next, err := e.store.Plans(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				if p.Status != plan.StatusCompleted {
					t.Fatalf("filter COMPLETED listed a %s plan", p.Status)
				}
				done = append(done, p.ID)
			}
			if next == "" {
				break
			}
			f.Cursor = next
		}
		if len(done) != 3 || done[0] != created[7].plan.ID || done[2] != created[1].plan.ID {
			t.Fatalf("completed plans %v", done)
		}
		if _, _, err := e.store.Plans(ctx, plan.ListFilter{Status: "DONE"}); !errors.Is(err, plan.ErrInvalid) {
			t.Fatalf("unknown status: %v", err)
		}
	})
}

func sortDesc(a, b, c string) (string, string, string) {
	s := []string{a, b, c}
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] > s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[0], s[1], s[2]
}
