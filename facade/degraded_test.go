package facade_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
)

// TestDegradedMarkSurvivesOtherCalls: the task reads fail (their master is
// unreachable, say) while the instance's other calls succeed (the run-id
// check, heartbeats, another master of a Cluster). Every answer served from
// memory must say degraded. The store's flag alone, cleared by any Redis
// call that succeeds, let some through unmarked (a review: 1 in 23).
func TestDegradedMarkSurvivesOtherCalls(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		hook := redistest.FailingNames("zrevrange", "hgetall", "hmget")
		hook.On.Store(false)
		b := setup(t, withHook(be, hook), sharedMode)
		b.stopDefault()
		dual := repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), b.store,
			repository.DualConfig{SharedWork: true})
		c := newCoordinator(t, b, dual, b.locks, "coord-a", nil)
		ctx := context.Background()
		if _, err := c.CreatePlan(ctx, spec([]task.StageSpec{gateStage("hold")}, "dg-1"), anyone); err != nil {
			t.Fatal(err)
		}
		b.gates.wait(t, "dg-1", "hold")
		hook.On.Store(true)
		defer hook.On.Store(false)
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // another goroutine's calls, which succeed
			defer wg.Done()
			for !stop.Load() {
				_, _ = dual.ServerRunID(ctx)
			}
		}()
		fromMemory, unmarked := 0, 0
		for range 2000 {
			v, err := c.TaskByTenant(ctx, "dg-1")
			if err != nil {
				continue
			}
			fromMemory++ // every read of the task fails: memory answered
			if !v.Degraded {
				unmarked++
			}
		}
		stop.Store(true)
		wg.Wait()
		if fromMemory == 0 || unmarked > 0 {
			t.Errorf("%d of %d answers served from memory not marked degraded", unmarked, fromMemory)
		}
	})
}
