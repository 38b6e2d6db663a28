package repository

import (
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestDualQueuedTaskFromCreatedCopy: the start entry of a task the Dual
// created and never wrote is answered from memory (no round trip), equal
// to Redis' record; other kinds of entries, and the task once a write
// based on the copy was refused (another writer moved it in Redis), are
// read from Redis.
func TestDualQueuedTaskFromCreatedCopy(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		de, d := newDualEnv(t, e)
		fx := createPlan(t, de, 2, 0)
		tk := fx.tasks[0]
		entry := plan.QueueEntry{Kind: plan.QueueStart, TenantID: tk.TenantID, TaskID: tk.ID}

		fromRedis, err := e.redis.QueuedTask(ctx, entry)
		if err != nil {
			t.Fatal(err)
		}
		var got *task.Task
		if n := e.counter.Count(func() { got, err = d.QueuedTask(ctx, entry) }); err != nil || n != 0 {
			t.Fatalf("start entry of a created task: %v with %d round trips, want memory's copy and none", err, n)
		}
		if got.ID != tk.ID || got.Status != task.StatusPending || got.Seq != 0 || got.TenantID != tk.TenantID ||
			got.PlanID != fromRedis.PlanID || !got.CreatedAt.Equal(fromRedis.CreatedAt) || got.Params["n"] != fromRedis.Params["n"] {
			t.Fatalf("memory's copy %+v, Redis' record %+v", got, fromRedis)
		}
		// Not a start entry, a tenant that does not match, a bad entry: Redis.
		for _, x := range []plan.QueueEntry{
			{Kind: plan.QueueResume, TenantID: tk.TenantID, TaskID: tk.ID},
			{Kind: plan.QueueStart, TenantID: tenantName(1), TaskID: tk.ID},
		} {
			if n := e.counter.Count(func() { _, _ = d.QueuedTask(ctx, x) }); n != 1 {
				t.Errorf("entry %+v: %d round trips, want Redis' 1", x, n)
			}
		}
		if _, err := d.QueuedTask(ctx, plan.QueueEntry{Kind: plan.QueueStart, TenantID: "a{b}", TaskID: tk.ID}); err == nil {
			t.Error("a hostile entry was answered")
		}

		// Another writer starts the task in Redis: the copy is stale. A
		// start from it (seq 0) is refused, and the task is read from Redis
		// from then on.
		start(t, e, tk, 1700000000000)
		stale, _ := d.QueuedTask(ctx, entry)
		if err := stale.Start(e.clock.Now(), "coord-b", 1700000000001); err != nil {
			t.Fatal(err)
		}
		_, err = d.WriteTask(ctx, task.Write{Task: stale, PrevStatus: task.StatusPending, ExpectSeq: 0,
			Guard: task.Guard{LockValue: "value-b", Fence: 1700000000001}, TakeLock: time.Minute})
		refusedAs(t, err, task.RefusedSeq)
		if n := e.counter.Count(func() { got, err = d.QueuedTask(ctx, entry) }); err != nil || n != 1 || got.Status != task.StatusRunning || got.Seq != 1 {
			t.Fatalf("after the refusal: %+v, %v with %d round trips; want Redis' RUNNING record", got, err, n)
		}
		// The other task is still answered from memory.
		other := plan.QueueEntry{Kind: plan.QueueStart, TenantID: fx.tasks[1].TenantID, TaskID: fx.tasks[1].ID}
		var copy1 *task.Task
		if n := e.counter.Count(func() { copy1, _ = d.QueuedTask(ctx, other) }); n != 0 {
			t.Errorf("the other task: %d round trips, want none", n)
		}
		// A start from the copy is one round trip: its fixed fields' digest
		// is Redis' (no resend with the fields themselves).
		if err := copy1.Start(e.clock.Now(), "coord-b", 1700000000002); err != nil {
			t.Fatal(err)
		}
		if n := e.counter.Count(func() {
			_, err = d.WriteTask(ctx, task.Write{Task: copy1, PrevStatus: task.StatusPending, ExpectSeq: 0,
				Guard: task.Guard{LockValue: "value-c", Fence: 1700000000002}, TakeLock: time.Minute})
		}); err != nil || n != 1 {
			t.Fatalf("start from the copy: %v with %d round trips, want 1", err, n)
		}
	})
}
