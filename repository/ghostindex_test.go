package repository

import (
	"testing"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// TestWriteAfterDataLossIndexesNoGhost: Redis lost its data (restarted
// empty) while a writer still held a plan's running task. The writer's
// next write is refused (the record is gone) and its counts move finds no
// plan; the plans-by-status index must not name the gone plan either.
func TestWriteAfterDataLossIndexesNoGhost(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t) // its own server: FLUSHALL below wipes it alone
	e := newRedisEnv(t, srv.Client(), "ghost:", Config{})
	ctx := ctxT(t)
	fx := createPlan(t, e, 1, 0)
	tk := fx.tasks[0]
	start := claimedStart(t, e, tk, "value-a", 7)
	res, err := e.store.WriteTask(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.client.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.setLock(tk.TenantID, "value-a") // a lease renewal would not: even so
	done := start.Task.Clone()
	if err := done.Complete(e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	_, err = e.store.WriteTask(ctx, task.Write{Task: done, PrevStatus: task.StatusRunning, ExpectSeq: res.Seq,
		Guard: task.Guard{LockValue: "value-a", Fence: 7}, ReleaseLock: true, ID: task.NewWriteID()})
	if err == nil {
		t.Fatal("write of a task whose record is gone: nil error, want a refusal")
	}
	for _, s := range task.Statuses {
		k, _ := e.redis.Keys().PlansByStatus(s)
		if _, err := e.client.ZScore(ctx, k, fx.plan.ID).Result(); err == nil {
			t.Errorf("%s names plan %s, whose record is gone (after: %v)", k, fx.plan.ID, err)
		}
	}
}
