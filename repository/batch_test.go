package repository

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

func TestRunningByOwner(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 4, 0)
		start(t, e, fx.tasks[0], 1)
		r1 := start(t, e, fx.tasks[1], 1)
		start(t, e, fx.tasks[2], 1).complete()
		// coord-b takes task 1 over.
		rerun(t, e, r1.tk, 2, "coord-b")

		owners := []string{"coord-a", "coord-b", "coord-c"}
		var got map[string]int
		if n := roundTrips(e, func() {
			var err error
			if got, err = e.store.RunningByOwner(ctx, fx.plan.ID, owners); err != nil {
				t.Fatalf("RunningByOwner: %v", err)
			}
		}); n != 1 && n != -1 {
			t.Errorf("RunningByOwner took %d round trips, want 1", n)
		}
		if want := map[string]int{"coord-a": 1, "coord-b": 1, "coord-c": 0}; !reflect.DeepEqual(got, want) {
			t.Fatalf("RunningByOwner = %v, want %v", got, want)
		}
		_, counts, _ := e.store.Plan(ctx, fx.plan.ID)
		if orphaned := counts[task.StatusRunning] - got["coord-a"] - got["coord-b"]; orphaned != 0 {
			t.Fatalf("RUNNING %d, live owners run %v: %d orphaned, want 0", counts[task.StatusRunning], got, orphaned)
		}
		// Without coord-b among the live owners its task counts as orphaned.
		got, _ = e.store.RunningByOwner(ctx, fx.plan.ID, []string{"coord-a"})
		if orphaned := counts[task.StatusRunning] - got["coord-a"]; orphaned != 1 {
			t.Fatalf("orphaned = %d, want 1", orphaned)
		}

		t.Run("UnknownPlanCountsNothing", func(t *testing.T) {
			got, err := e.store.RunningByOwner(ctx, plan.NewID(t0), owners)
			if want := map[string]int{"coord-a": 0, "coord-b": 0, "coord-c": 0}; err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("RunningByOwner of an unknown plan = %v, %v", got, err)
			}
		})
		t.Run("NoOwnersNoRoundTrip", func(t *testing.T) {
			if n := roundTrips(e, func() {
				if got, err := e.store.RunningByOwner(ctx, fx.plan.ID, nil); err != nil || len(got) != 0 {
					t.Fatalf("RunningByOwner without owners = %v, %v", got, err)
				}
			}); n > 0 {
				t.Errorf("%d round trips, want none", n)
			}
		})
		t.Run("ErrInvalid", func(t *testing.T) {
			if _, err := e.store.RunningByOwner(ctx, fx.plan.ID, []string{"coord a"}); !errors.Is(err, task.ErrInvalid) {
				t.Errorf("bad owner: %v, want task.ErrInvalid", err)
			}
			if _, err := e.store.RunningByOwner(ctx, "plan-x", owners); !errors.Is(err, plan.ErrInvalid) {
				t.Errorf("bad plan id: %v, want plan.ErrInvalid", err)
			}
		})
	})
}

func TestTasksByTenant(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const created = 990
		fx := createPlan(t, e, created, 0)
		r := start(t, e, fx.tasks[7], 1)
		cp, _ := checkpoint.Empty().Complete(0, "push-config", map[string]any{"ok": true})
		r.mustWrite(task.StatusRunning, task.Write{Checkpoint: &cp})

		for _, n := range []int{1, 100, 1000} {
			t.Run(fmt.Sprintf("%dTenants", n), func(t *testing.T) {
				ids := make([]string, n)
				for i := range ids {
					// The last 10 of 1000 have no task.
					ids[i] = tenantName(i)
				}
				var tasks map[string]*task.Task
				var ckpts map[string]*checkpoint.Checkpoint
				if rt := roundTrips(e, func() {
					var err error
					if tasks, ckpts, err = e.store.TasksByTenant(ctx, ids); err != nil {
						t.Fatalf("TasksByTenant: %v", err)
					}
				}); rt != 2 && rt != -1 {
					t.Errorf("TasksByTenant of %d tenants took %d round trips, want 2", n, rt)
				}
				if want := min(n, created); len(tasks) != want {
					t.Fatalf("%d tasks, want %d (tenants without a task are absent)", len(tasks), want)
				}
				for i, id := range ids {
					tk, ok := tasks[id]
					switch {
					case i >= created && ok:
						t.Fatalf("tenant %s has no task but got %+v", id, tk)
					case i < created && (!ok || tk.ID != fx.tasks[i].ID || tk.TenantID != id):
						t.Fatalf("tenant %s: %+v, want task %s", id, tk, fx.tasks[i].ID)
					}
				}
				wantCkpts := 0
				if n > 7 {
					wantCkpts = 1
					if c := ckpts[tenantName(7)]; c == nil || c.ContextData["push-config"] == nil || tasks[tenantName(7)].Seq != r.tk.Seq {
						t.Fatalf("tenant 7: checkpoint %+v, task %+v", c, tasks[tenantName(7)])
					}
				}
				if len(ckpts) != wantCkpts {
					t.Fatalf("%d checkpoints, want %d", len(ckpts), wantCkpts)
				}
			})
		}

		t.Run("Empty", func(t *testing.T) {
			if rt := roundTrips(e, func() {
				tasks, ckpts, err := e.store.TasksByTenant(ctx, nil)
				if err != nil || len(tasks) != 0 || len(ckpts) != 0 {
					t.Fatalf("TasksByTenant(nil) = %v, %v, %v", tasks, ckpts, err)
				}
			}); rt > 0 {
				t.Errorf("%d round trips, want none", rt)
			}
		})
		t.Run("Duplicates", func(t *testing.T) {
			tasks, _, err := e.store.TasksByTenant(ctx, []string{tenantName(1), tenantName(1)})
			if err != nil || len(tasks) != 1 {
				t.Fatalf("duplicate ids: %v, %v", tasks, err)
			}
		})
		t.Run("ErrInvalid", func(t *testing.T) {
			tooMany := make([]string, TenantBatchMax+1)
			for i := range tooMany {
				tooMany[i] = tenantName(i)
			}
			for name, ids := range map[string][]string{
				"Brace":   {tenantName(0), "{t-00001}"},
				"Glob":    {"t-*"},
				"Empty":   {""},
				"TooMany": tooMany,
			} {
				if rt := roundTrips(e, func() {
					if _, _, err := e.store.TasksByTenant(ctx, ids); !errors.Is(err, task.ErrInvalid) {
						t.Errorf("%s: err = %v, want task.ErrInvalid", name, err)
					}
				}); rt > 0 {
					t.Errorf("%s: %d round trips before refusing, want none", name, rt)
				}
			}
		})
	})
}
