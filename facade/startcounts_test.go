package facade_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// failStartMove lets the first pipeline holding a task's start (a task
// write storing RUNNING) reach Redis, then answers the plan counts' move of
// that pipeline (move_plan_counts.lua, whose first key is the plan's
// counts hash) with an error reply: the start landed, its counts did not
// move — the store answers the write's result with the error.
type failStartMove struct{ hits atomic.Int32 }

func (h *failStartMove) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failStartMove) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *failStartMove) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := next(ctx, cmds); err != nil {
			return err
		}
		start := false
		for _, c := range cmds {
			if (taskWrite(c, true) || taskWrite(c, false)) && writesStatus(c, task.StatusRunning) {
				start = true
			}
		}
		if !start {
			return nil
		}
		for _, c := range cmds {
			if redistest.IsCountsMove(c) && h.hits.Add(1) == 1 {
				c.SetErr(redistest.ReplyError("ERR injected: the plan counts' move failed"))
			}
		}
		return nil
	}
}

// TestStartLandedCountsNotMoved: a task's start write lands (the record is
// RUNNING, with the tenant lock the write took) but the plan counts' move
// sent with it fails. The store answers the write's result with the error;
// the start is a start all the same, and the task runs to its end. It did
// not: the coordinator took the start for one that had not landed, logged
// "could not mark task RUNNING; it will be started again" and queued the
// task again — and the next claim, finding it RUNNING, dropped it: the task
// stayed RUNNING with no run anywhere (orphaned once its lease lapsed), the
// plan RUNNING for good. The final write moves the counts from the ledger
// entry the failed move left (PENDING): they add up at the end.
func TestStartLandedCountsNotMoved(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		opts []option
	}{{"shared", []option{sharedMode}}, {"owner", nil}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			forBackends(t, func(t *testing.T, be redistest.Backend) {
				hook := &failStartMove{}
				b := setup(t, withHook(be, hook), mode.opts...)
				v := b.create(spec([]task.StageSpec{noopStage("one")}, "t-moved"))
				tv := b.waitTask(b.coord, "t-moved", task.StatusCompleted)
				if n := hook.hits.Load(); n < 1 {
					t.Fatal("no start's counts move failed (hook not hit)")
				}
				pv := b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
				if tv.Attempt != 1 || pv.Counts[task.StatusCompleted] != 1 || pv.Counts.Total() != 1 {
					t.Errorf("task attempt %d, plan counts %v; want attempt 1, 1 task COMPLETED", tv.Attempt, pv.Counts)
				}
				if n, types := timelineCount(t, b.coord, "t-moved", task.EventStarted); n != 1 {
					t.Errorf("%d task.started entries, want 1: %v", n, types)
				}
			})
		})
	}
}
