package facade_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
)

// TestLeaseLostLetsMemoryGo: a run whose lease is lost (another holder has
// the tenant's lock) stops without writing. The Dual store's memory must
// let the task go: it held it, RUNNING under this instance, for good —
// never dropped (only this instance's writes drop a task), and answered so
// while Redis is unreachable although another instance may have taken the
// task over and completed it.
func TestLeaseLostLetsMemoryGo(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode, withConfig(func(c *facade.Config) { c.Lease = time.Second }))
		b.stopDefault()
		dual := repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), b.store,
			repository.DualConfig{SharedWork: true})
		c := newCoordinator(t, b, dual, b.locks, "coord-a", nil)
		ctx := context.Background()
		v, err := c.CreatePlan(ctx, spec([]task.StageSpec{gateStage("hold"), b.httpStage("deploy", task.RetryPolicy{})}, "lost-1"), anyone)
		if err != nil {
			t.Fatal(err)
		}
		b.gates.wait(t, "lost-1", "hold")
		tv, err := c.TaskByTenant(ctx, "lost-1")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := dual.Memory().Task(ctx, tv.Task.ID); err != nil {
			t.Fatalf("the running task is not in memory: %v", err)
		}
		// Another instance has the tenant now.
		key, err := b.store.Keys().Lock("lost-1")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.client.Set(ctx, key, "coord-b:taken-over", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		b.idle(c)
		if n := b.target.count("lost-1", "deploy"); n != 0 {
			t.Fatalf("the run went on after its lease was lost: deploy called %d times", n)
		}
		if got, _, err := dual.Memory().Task(ctx, tv.Task.ID); !errors.Is(err, task.ErrNotFound) {
			t.Errorf("memory still holds the task after its lease was lost: %s owner %s (err %v)", got.Status, got.Owner, err)
		}
		if _, _, err := dual.Memory().Plan(ctx, v.ID); !errors.Is(err, plan.ErrNotFound) {
			t.Errorf("memory holds the shared plan: %v", err)
		}
	})
}
