package facade_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
)

type failCtxKey struct{}

// otherReader: while armed, the first command it sees first lets another
// request (its context marked to fail) be answered from memory.
type otherReader struct {
	armed atomic.Bool
	other func()
}

func (*otherReader) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *otherReader) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if ctx.Value(failCtxKey{}) != nil {
			err := errors.New("injected: connection refused")
			c.SetErr(err)
			return err
		}
		if h.armed.CompareAndSwap(true, false) {
			h.other()
		}
		return next(ctx, c)
	}
}
func (h *otherReader) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(failCtxKey{}) != nil {
			err := errors.New("injected: connection refused")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		if h.armed.CompareAndSwap(true, false) {
			h.other()
		}
		return next(ctx, cmds)
	}
}

// TestDegradedMarkIsPerRead: a search answered by Redis, empty, while
// another request is answered from memory concurrently (one master of a
// Cluster down, a flapping link): the empty answer is Redis' and true, and
// must not be marked degraded nor refused as "redis is not answering" (a
// store-wide count of memory answers did: a review).
func TestDegradedMarkIsPerRead(t *testing.T) {
	hook := &otherReader{}
	be := withHook(redistest.Backends()[1], hook)
	b := setup(t, be)
	b.stopDefault()
	dual := repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), b.store)
	c := newCoordinator(t, b, dual, b.locks, "coord-a", nil)
	ctx := context.Background()
	no := false
	s := spec(threeNoops(), "dm-1")
	s.Start = &no
	if _, err := c.CreatePlan(ctx, s, anyone); err != nil {
		t.Fatal(err)
	}
	var otherErr error
	var otherDegraded bool
	hook.other = func() {
		v, err := c.TaskByTenant(context.WithValue(ctx, failCtxKey{}, 1), "dm-1")
		otherErr, otherDegraded = err, v.Degraded
	}
	// Without the other request: an empty, true answer.
	if _, err := c.SearchTasks(ctx, facade.TaskQuery{Statuses: []task.Status{task.StatusFailed}}); err != nil {
		t.Fatalf("search with redis up: %v", err)
	}
	hook.armed.Store(true)
	page, err := c.SearchTasks(ctx, facade.TaskQuery{Statuses: []task.Status{task.StatusFailed}})
	t.Logf("other request: err %v degraded %v", otherErr, otherDegraded)
	if err != nil || page.Degraded {
		t.Errorf("search answered by redis while another request was answered from memory: %d tasks, degraded %v, err %v; want an empty page, not degraded", len(page.Tasks), page.Degraded, err)
	}
}
