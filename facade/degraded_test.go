package facade_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
)

// readFailer fails, while on, the commands named in names (and pipelines
// holding one) as an unreachable Redis would.
type readFailer struct {
	on    atomic.Bool
	names []string
}

func (f *readFailer) fails(c redis.Cmder) bool {
	return f.on.Load() && slices.Contains(f.names, c.Name())
}

func (*readFailer) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *readFailer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if f.fails(c) {
			err := errors.New("injected: connection refused")
			c.SetErr(err)
			return err
		}
		return next(ctx, c)
	}
}
func (f *readFailer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, f.fails) {
			err := errors.New("injected: connection refused")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// TestDegradedMarkSurvivesOtherCalls: the task reads fail (their master is
// unreachable, say) while the instance's other calls succeed (the run-id
// check, heartbeats, another master of a Cluster). Every answer served from
// memory must say degraded. The store's flag alone, cleared by any Redis
// call that succeeds, let some through unmarked (a review: 1 in 23).
func TestDegradedMarkSurvivesOtherCalls(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		hook := &readFailer{names: []string{"zrevrange", "hgetall", "hmget"}}
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
		hook.on.Store(true)
		defer hook.on.Store(false)
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
